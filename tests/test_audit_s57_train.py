"""Fifty-seventh session's audit of SIGTERM while a finished `polyrec train` reports: what `--json` readers get,
for a run that ended `done`, `nan` (exit 1) or had nothing to train."""

from __future__ import annotations

import json
import signal

import pytest

from test_user_audit_train import SLOW_REPORT, SMALL_RUN, _polyrec

CUT = "stopped by signal 15 (SIGTERM) while reporting, after the run ended"


def _cut_while_reporting(args: list[str], signum: int = signal.SIGTERM) -> tuple[int, list[dict], str]:
    """Exit code, stdout's JSON records and stderr of `polyrec train ARGS` sent ``signum`` as it reports."""
    proc = _polyrec([*SMALL_RUN, *args], code=SLOW_REPORT)
    lines = []
    for line in iter(proc.stdout.readline, ""):
        if line == "reporting\n":
            break
        lines.append(line)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err[-3000:]
    return proc.returncode, [json.loads(line) for line in [*lines, *out.splitlines()]], err


@pytest.mark.parametrize("args, code, status", [(["--steps", "2"], 0, "done"),
                                                (["--steps", "30", "--lr", "1e30", "--log-every", "1"], 1, "nan")])
def test_a_json_run_cut_while_reporting_still_ends_with_its_result(tmp_path, args, code, status):
    """With --json the run's `result` line is how a reader learns how it ended; SIGTERM while it reported left
    stdout without one (a `nan` run: a `stopped` event, exit code 1, no result)."""
    returncode, records, err = _cut_while_reporting([*args, "--checkpoint-dir", str(tmp_path / "run")])
    assert returncode == code, err[-3000:]
    assert f"{CUT} ({status} at step" in err, err[-3000:]
    assert records[-1]["event"] == "result" and records[-1]["status"] == status, records[-2:]
    assert sum(r["event"] == "result" for r in records) == 1


def test_a_run_with_nothing_to_train_cut_while_reporting_says_so(tmp_path):
    """The cut report said "(done at step 2)", as for a run that trained to step 2: the word that nothing was
    trained is the report's, which the signal cut."""
    from polyrec.runtime import TrainConfig, Trainer

    run = tmp_path / "run"
    Trainer(TrainConfig(steps=2, batch_size=8, row_cap=100, device="cpu", cpu_threads=1, checkpoint_dir=run),
            progress=False).train()
    returncode, records, err = _cut_while_reporting(["--steps", "2", "--checkpoint-dir", str(run), "--resume"])
    assert returncode == 0, err[-3000:]
    assert f"{CUT} (nothing to train: the checkpoint is at step 2)" in err, err[-3000:]
    assert [r["event"] for r in records] == ["result"] and "nothing to train" in records[0]["message"]


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
                    reason="Ctrl-C is ignored here, and so in the child the test starts")
@pytest.mark.parametrize("args, code, status", [(["--steps", "2"], 0, "done"),
                                                (["--steps", "30", "--lr", "1e30", "--log-every", "1"], 1, "nan")])
def test_ctrl_c_while_a_json_run_reports_keeps_its_exit_code_and_result(tmp_path, args, code, status):
    """Ctrl-C (SIGINT) while a finished run reported raised KeyboardInterrupt through the report: the CLI's exit
    code for an interrupt took the place of the run's own, and --json readers got no `result` line. Now it cuts
    the report short as SIGTERM does."""
    returncode, records, err = _cut_while_reporting([*args, "--checkpoint-dir", str(tmp_path / "run")],
                                                    signal.SIGINT)
    assert returncode == code, err[-3000:]
    assert f"stopped by signal 2 (SIGINT) while reporting, after the run ended ({status} at step" in err, err[-3000:]
    assert "Aborted" not in err, err[-3000:]
    assert records[-1]["event"] == "result" and records[-1]["status"] == status, records[-2:]
    assert sum(r["event"] == "result" for r in records) == 1
