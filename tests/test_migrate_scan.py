"""Scanner: precision/recall on the labelled corpus, rule coverage, SARIF schema, CLI exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate import scan_cuda
from polyrec.migrate.rules import RULES
from polyrec.migrate.sarif import to_sarif
from polyrec.migrate.scan import scan_paths

CORPUS = Path(__file__).parent / "migrate_corpus" / "scan"
SCHEMA = Path(__file__).parent / "migrate_corpus" / "schema" / "sarif-schema-2.1.0.json"
COMPILE_ONLY_RULES = {"PM111"}  # found by compiling (tests/test_migrate_verify.py), not by parsing


def expected_findings() -> set[tuple[str, int, str]]:
    expected = set()
    for path in CORPUS.iterdir():
        if path.suffix == ".md":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.search(r"expect: (PM\d+(?:, PM\d+)*)", line)
            if match:
                expected |= {(path.name, number, rule) for rule in match.group(1).split(", ")}
    return expected


def test_precision_and_recall_on_corpus():
    result = scan_paths([CORPUS])
    assert result.complete, result.not_scanned
    got = {(Path(f.path).name, f.line, f.rule) for f in result.findings}
    expected = expected_findings()
    true_pos = len(got & expected)
    precision, recall = true_pos / len(got), true_pos / len(expected)
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, sorted(got - expected), sorted(expected - got))


def test_every_rule_has_positive_and_negative_examples():
    expected_rules = {rule for _, _, rule in expected_findings()}
    assert set(RULES) - COMPILE_ONLY_RULES <= expected_rules
    for rule in set(RULES) - COMPILE_ONLY_RULES:
        languages = RULES[rule].languages
        suffixes = {".py"} if languages == ("python",) else {".cu", ".cuh", ".py"}
        negatives = [p for p in CORPUS.glob("neg_*") if p.suffix in suffixes]
        assert negatives, rule
    negatives = scan_paths(sorted(CORPUS.glob("neg_*")))
    assert negatives.findings == []


def test_rocm_compatible_calls_are_not_flagged(tmp_path):
    src = tmp_path / "ok.py"
    src.write_text("import torch\nimport torch.distributed as dist\n"
                   "dist.init_process_group('nccl')\nx = torch.ones(3, device='cuda')\n"
                   "torch.cuda.synchronize()\ntorch.cuda.nvtx.range_push('a')\n"
                   "n = torch.cuda.device_count()\nprops = torch.cuda.get_device_properties(0)\n")
    assert scan_paths([src]).findings == []


def test_sarif_validates_against_schema():
    sarif = to_sarif(scan_paths([CORPUS]))
    jsonschema.validate(sarif, json.loads(SCHEMA.read_text()))
    run = sarif["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == set(RULES)
    assert run["results"] and all(r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1
                                  for r in run["results"])


def test_cli_exit_codes_json_and_sarif(tmp_path):
    runner = CliRunner()
    dirty = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu"), "--json"])
    assert dirty.exit_code == 1, dirty.output
    assert {f["rule"] for f in json.loads(dirty.output)["findings"]} == {"PM101", "PM102"}
    clean = runner.invoke(app, ["migrate", "scan", str(CORPUS / "neg_warp.cu"), "--sarif", str(tmp_path / "o.sarif")])
    assert clean.exit_code == 0, clean.output
    jsonschema.validate(json.loads((tmp_path / "o.sarif").read_text()), json.loads(SCHEMA.read_text()))
    notes_only = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_libs.cu"), "--rule", "PM105"])
    assert notes_only.exit_code == 0  # CUB is a note; the default --fail-on is warning
    strict = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_libs.cu"), "-r", "PM105", "--fail-on", "note"])
    assert strict.exit_code == 1
    assert runner.invoke(app, ["migrate", "scan", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["migrate", "scan", str(CORPUS), "--rule", "PM999"]).exit_code == 2


def test_missing_parser_reports_cuda_files_as_not_scanned(monkeypatch):
    def missing():
        raise scan_cuda.ParserMissing(f"scanning CUDA/C++ needs tree-sitter-cuda: {scan_cuda.INSTALL_HINT}")

    monkeypatch.setattr(scan_cuda, "_language", missing)
    result = scan_paths([CORPUS])
    cuda_files = {p.name for p in CORPUS.iterdir() if p.suffix in (".cu", ".cuh")}
    assert {Path(p).name for p in result.not_scanned} == cuda_files
    assert all("tree-sitter-cuda" in why for why in result.not_scanned.values())
    assert {Path(f.path).suffix for f in result.findings} == {".py"}
    runner = CliRunner()
    assert runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu")]).exit_code == 2


@pytest.mark.parametrize("suffix", [".cu", ".py"])
def test_non_utf8_source_is_scanned(tmp_path, suffix):
    src = tmp_path / f"latin1{suffix}"
    line = b"int lane = threadIdx.x % 32; // caf\xe9\n" if suffix == ".cu" else b"WARP_SIZE = 32  # caf\xe9\n"
    src.write_bytes(line)
    assert [f.rule for f in scan_paths([src]).findings] == ["PM101"]
