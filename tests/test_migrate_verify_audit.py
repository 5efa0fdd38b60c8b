"""Bugs found auditing verify / sandbox / port: candidates that were accepted though they computed with
torch between launches or wrote to their inputs, a port report lost on Ctrl-C, a traceback for a
reference that fails to import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate.port import port
from polyrec.migrate.providers import RecordedTranscriptProvider
from polyrec.migrate.verify import VerifyConfig, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
KERNEL = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
REFERENCE = "migrate_ref_ops:axpy"
NUMERICS = VerifyConfig(compile=False, seeds=(0,))
HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
TOUCH = ("@triton.jit\ndef touch_kernel(p, n, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
         "    tl.store(p + offs, tl.load(p + offs, mask=offs < n), mask=offs < n)\n\n\n")


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def test_output_computed_by_torch_between_two_launches_is_rejected(tmp_path):
    """A do-nothing launch on the fresh output, torch computes it, a second do-nothing launch: accepted."""
    candidate = tmp_path / "between.py"
    candidate.write_text(HEADER + TOUCH + "def run(x, y):\n    out = torch.empty_like(x)\n"
                         "    touch_kernel[(1,)](out, 1, BLOCK=16)\n    out.copy_(2.0 * x + y)\n"
                         "    touch_kernel[(1,)](out, 1, BLOCK=16)\n    return out\n")
    report = verify(candidate, REFERENCE, NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("changed between two Triton launches" in f for f in report.failures), report.failures


def test_candidate_that_writes_to_an_input_is_rejected(tmp_path):
    """Right output, but y zeroed by the kernel: the caller's tensor is destroyed; it was accepted."""
    source = (HERE / "good_axpy.py").read_text()
    clobber = "    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)\n"
    assert clobber in source
    candidate = tmp_path / "clobbers.py"
    candidate.write_text(source.replace(clobber, clobber + "    tl.store(y_ptr + offs, 0.0 * y, mask=mask)\n"))
    report = verify(candidate, REFERENCE, NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("wrote to its input(s) [1]" in f for f in report.failures), report.failures


class _InterruptedProvider(RecordedTranscriptProvider):
    def complete(self, messages):
        if self.calls:
            raise KeyboardInterrupt
        return super().complete(messages)


def test_port_report_is_written_when_a_later_round_is_interrupted(tmp_path):
    """Ctrl-C in round 2 left no port-report.json (the CLI wrote it only after port() returned)."""
    reply = f"```python\n{(HERE / 'adv_one_shape.py').read_text()}```\n"
    provider = _InterruptedProvider(replies=[reply])
    with pytest.raises(KeyboardInterrupt):
        port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=3, config=NUMERICS)
    doc = json.loads((tmp_path / "port-report.json").read_text())
    assert doc["rounds_used"] == 2 and not doc["accepted"] and doc["transcript_path"]
    assert any("stopped in round 2: KeyboardInterrupt" in item for item in doc["left"]), doc["left"]
    assert (tmp_path / "attempt_1.py").is_file()


def test_reference_that_fails_to_import_is_bad_input_not_a_traceback(tmp_path, monkeypatch):
    (tmp_path / "broken_ref.py").write_text("SHAPES = [(1,), (2,), (3,)]\ndef f(x) return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(app, ["migrate", "verify", str(HERE / "good_axpy.py"), "--reference",
                                      "broken_ref:f", "--no-compile", "--json"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == "" and "importing broken_ref failed: SyntaxError" in " ".join(result.stderr.split())


def test_inputs_come_from_seeds_drawn_per_run_and_the_report_names_them(monkeypatch):
    """The seeds were always 0, 1, 2: a candidate could special-case the inputs it is checked on. Now a run
    draws its first seed (secrets) unless given one, and the report and its failures name the seeds run."""
    import secrets

    from polyrec.migrate import verify as verify_module

    monkeypatch.setattr(secrets, "randbelow", lambda n: 4242)
    assert VerifyConfig().seeds == (4242, 4243, 4244)
    report = verify(HERE / "adv_one_shape.py", REFERENCE, VerifyConfig(compile=False,
                                                                       seeds=verify_module.fresh_seeds(1, 77)))
    assert not report.accepted and report.seeds == (77,)
    assert any("seed 77)" in f for f in report.failures), report.failures
    assert report.as_dict()["seeds"] == [77]


def test_a_timeout_kills_what_the_child_started(tmp_path):
    """A process the sandbox child started (the compile stage's ptxas) outlived a timeout: only the child was
    killed."""
    import os
    import time

    from polyrec.migrate.verify import run_as_group

    pid_file = tmp_path / "grandchild.pid"
    got = run_as_group(["sh", "-c", f"sleep 30 & echo $! > {pid_file}; sleep 30"], env=dict(os.environ),
                       timeout_s=1.0, preexec_fn=os.setsid)
    assert got is None
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild), "the child's own process outlived the timeout"
    assert run_as_group(["sh", "-c", "echo oops >&2; exit 3"], env=dict(os.environ), timeout_s=10.0,
                        preexec_fn=os.setsid) == (3, "oops\n")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
