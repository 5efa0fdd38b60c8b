"""`polyrec migrate port` on the command line: verify's --seeds/--seed/--timeout, --rounds checked, and a
progress line per step of a round on stderr (stdout stays the --json report); port()'s progress callback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import polyrec.migrate.port as port_module
from polyrec.cli import app
from polyrec.migrate.port import port
from polyrec.migrate.providers import OpenAICompatibleProvider, RecordedTranscriptProvider
from polyrec.migrate.verify import VerifyConfig

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
KERNEL = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
PORT = ["migrate", "port", str(KERNEL), "--reference", "migrate_ref_ops:axpy", "--no-compile"]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def _reply(name: str) -> str:
    return f"Here is the port.\n```python\n{(HERE / name).read_text()}```\n"


@pytest.fixture
def replies(monkeypatch) -> list[str]:
    """The replies the CLI's provider gives (a RecordedTranscriptProvider in place of the HTTP endpoint)."""
    recorded: list[str] = []
    provider = RecordedTranscriptProvider(replies=recorded, name="stub-llm")
    monkeypatch.setattr(OpenAICompatibleProvider, "from_env", classmethod(lambda cls, *args: provider))
    return recorded


@pytest.fixture
def configs(monkeypatch) -> list[VerifyConfig]:
    """The VerifyConfig of each verify() port makes."""
    seen: list[VerifyConfig] = []
    real = port_module.verify

    def spy(candidate, reference, config=None):
        seen.append(config)
        return real(candidate, reference, config)

    monkeypatch.setattr(port_module, "verify", spy)
    return seen


def test_port_passes_seeds_seed_and_timeout_to_verify_and_keeps_json_on_stdout(tmp_path, replies, configs):
    replies += [_reply("good_axpy.py")]
    result = runner.invoke(app, [*PORT, "-o", str(tmp_path / "out"), "--seeds", "2", "--seed", "7",
                                 "--timeout", "120", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.stdout)  # nothing but the report
    assert report["accepted"] and report["rounds_used"] == 1
    assert [(c.seeds, c.timeout_s, c.cpu_s, c.compile) for c in configs] == [((7, 8), 120.0, 120, False)]
    entry = json.loads(Path(report["transcript_path"]).read_text().splitlines()[0])
    assert entry["verdict"]["seeds"] == [7, 8]
    assert "round 1/4: asking stub-llm..." in result.stderr
    assert "round 1/4: verifying attempt_1.py..." in result.stderr
    assert "round 1/4: accepted" in result.stderr
    assert "round 1/4" not in result.stdout


def test_port_reports_each_round_on_stderr(tmp_path, replies):
    replies += [_reply("adv_one_shape.py"), _reply("good_axpy.py")]
    result = runner.invoke(app, [*PORT, "-o", str(tmp_path / "out"), "--rounds", "2", "--seeds", "1"])
    assert result.exit_code == 0, (result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.startswith("round ")]
    assert lines[:2] == ["round 1/2: asking stub-llm...", "round 1/2: verifying attempt_1.py..."]
    assert re.fullmatch(r"round 1/2: rejected \([1-9][0-9]* failures?\)", lines[2]), lines
    assert lines[3:] == ["round 2/2: asking stub-llm...", "round 2/2: verifying attempt_2.py...",
                         "round 2/2: accepted"]


@pytest.mark.parametrize("option, value, says", [
    ("--rounds", "0", "--rounds must be at least 1, got 0"),
    ("--seeds", "0", "--seeds must be at least 1, got 0"),
    ("--seed", "-1", "--seed must be in [0, 2147483648), got -1"),
    ("--timeout", "0", "--timeout must be a positive number of seconds"),
    ("--timeout", "nan", "--timeout must be a positive number of seconds"),
])
def test_port_refuses_bad_options_before_writing_anything(tmp_path, replies, option, value, says):
    result = runner.invoke(app, [*PORT, "-o", str(tmp_path / "out"), option, value, "--json"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert says in " ".join(result.stderr.split()), result.stderr
    assert not (tmp_path / "out").exists()


def test_verify_refuses_zero_seeds_like_port(tmp_path):
    result = runner.invoke(app, ["migrate", "verify", str(HERE / "good_axpy.py"), "--reference",
                                 "migrate_ref_ops:axpy", "--no-compile", "--seeds", "0", "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "--seeds must be at least 1, got 0" in result.stderr


def test_port_api_reports_progress_to_a_callback_and_is_silent_without_one(tmp_path, capsys):
    config = VerifyConfig(compile=False, seeds=(0,))
    provider = RecordedTranscriptProvider(replies=[_reply("good_axpy.py")] * 2, name="stub-llm")
    lines: list[str] = []
    assert port(KERNEL, "migrate_ref_ops:axpy", provider, work_dir=tmp_path / "a", rounds=1, config=config,
                progress=lines.append).accepted
    assert lines == ["round 1/1: asking stub-llm...", "round 1/1: verifying attempt_1.py...", "round 1/1: accepted"]
    capsys.readouterr()
    assert port(KERNEL, "migrate_ref_ops:axpy", provider, work_dir=tmp_path / "b", rounds=1, config=config).accepted
    assert capsys.readouterr() == ("", "")


def test_port_api_refuses_a_config_without_seeds_before_asking_the_provider(tmp_path):
    """Was: round 1 asked the provider, then verify() raised on the empty seeds."""
    provider = RecordedTranscriptProvider(replies=[_reply("good_axpy.py")])
    with pytest.raises(ValueError, match="at least one seed"):
        port(KERNEL, "migrate_ref_ops:axpy", provider, work_dir=tmp_path / "out",
             config=VerifyConfig(compile=False, seeds=()))
    assert provider.calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [PORT, ["migrate", "hipify", str(KERNEL)]])
def test_an_output_folder_that_is_a_file_is_named_so(tmp_path, command):
    """`-o FILE` naming an existing file said "--out FILE: File exists", which reads as a refusal to overwrite."""
    existing = tmp_path / "out"
    existing.write_text("a file\n")
    result = runner.invoke(app, [*command, "-o", str(existing)])
    assert result.exit_code == 2, result.output
    assert f"--out {existing} is a file, not a folder" in " ".join(result.stderr.split()), result.stderr
    assert existing.read_text() == "a file\n"
