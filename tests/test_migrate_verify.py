"""verify: the adversarial set is rejected, correct kernels accepted; compile stage (marked compile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrec.migrate.verify import VerifyConfig, static_check, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
REFERENCE = "migrate_ref_ops:axpy"
NUMERICS = VerifyConfig(compile=False, seeds=(0, 1))


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.parametrize("name", ["good_axpy.py", "good_axpy_fma.py"])
def test_correct_kernels_are_accepted(name):
    report = verify(HERE / name, REFERENCE, NUMERICS)
    assert report.accepted, report.failures
    assert report.stages == {"static": "pass", "numerics": "pass", "compile": "skipped: disabled"}


@pytest.mark.parametrize(("name", "stage", "why"), [
    ("adv_writes_nothing.py", "numerics", "NaN in output"),
    ("adv_returns_input.py", "numerics", "shares memory with an input"),
    ("adv_one_shape.py", "numerics", "shape (4097,)"),
    ("adv_cached.py", "numerics", "seed 1): wrong values"),
    ("adv_reads_reference.py", "static", "import of 'migrate_ref_ops'"),
    ("adv_reads_reference_dynamic.py", "static", "import of 'sys'"),
    ("adv_torch_in_kernel.py", "static", "try/except inside kernel"),
])
def test_adversarial_kernels_are_rejected(name, stage, why):
    report = verify(HERE / name, REFERENCE, NUMERICS)
    assert not report.accepted
    assert report.stages[stage] == "fail"
    assert any(why in f for f in report.failures), report.failures


def test_sandbox_blocks_network_and_reference_import(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text((HERE / "good_axpy.py").read_text().replace(
        "def run(x, y):", "def run(x, y):\n    torch.hub.load_state_dict_from_url('http://127.0.0.1:9/x')"))
    report = verify(sneaky, REFERENCE, NUMERICS)
    assert not report.accepted and any("not allowed" in f for f in report.failures), report.failures


def test_static_check_names_each_problem():
    problems = static_check("import os\nimport triton\n@triton.jit\ndef k(x):\n    torch.sum(x)\n", "ref", "f")
    assert any("import of 'os'" in p for p in problems)
    assert any("torch used inside kernel k" in p for p in problems)
    assert any("no top-level run" in p for p in problems)


def _amd_specs_present() -> bool:
    from polyrec.hardware import catalog

    return {"MI300X", "MI350X"} <= set(catalog())


@pytest.mark.compile
def test_compile_stage_accepts_portable_kernel_for_three_targets():
    if not _amd_specs_present():
        pytest.skip("MI300X / MI350X device specs not in the catalog yet")
    report = verify(HERE / "good_axpy.py", REFERENCE, VerifyConfig(seeds=(0,)))
    assert report.accepted, report.failures
    assert {r["device"] for r in report.compile_reports} == {"H200", "MI300X", "MI350X"}
    assert {r["target"] for r in report.compile_reports} == {"cuda:90", "hip:gfx942", "hip:gfx950"}
