"""Regressions found using ``polyrec migrate verify`` / ``port`` as a first-time user would."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate.verify import VerifyConfig, verify

NUMERICS = VerifyConfig(compile=False, seeds=(0,))
REFERENCE = """import torch

SHAPES = [(100,), (1000,), (3000,)]


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))


def axpy(x, y):
    return 2.0 * x + y
"""
AXPY = """import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs {cmp} n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)
    {extra}


def run(x, y):
{prelude}    out = torch.empty_like(x)
    n = x.numel()
    axpy_kernel[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    return out
"""


def _candidate(tmp_path: Path, monkeypatch, *, cmp: str = "<", extra: str = "", prelude: str = "") -> Path:
    (tmp_path / "audit_ref_axpy.py").write_text(REFERENCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    candidate = tmp_path / "port.py"
    candidate.write_text(AXPY.format(cmp=cmp, extra=extra, prelude=prelude))
    return candidate


def test_a_store_one_element_past_the_output_is_rejected(tmp_path, monkeypatch):
    """Every element right, plus ``out[n] = 0``: on a GPU that write lands in the next tensor of the caching
    allocator's segment. It was accepted (the CPU heap had slack there)."""
    candidate = _candidate(tmp_path, monkeypatch, extra="tl.store(out_ptr + n, 0.0)")
    report = verify(candidate, "audit_ref_axpy:axpy", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert "case 0 (shape (100,), seed 0): a store landed outside 1 tensor(s)" in report.failures[0], report.failures


def test_a_store_one_element_before_the_output_is_rejected(tmp_path, monkeypatch):
    candidate = _candidate(tmp_path, monkeypatch, extra="tl.store(out_ptr - 1, 0.0)")
    report = verify(candidate, "audit_ref_axpy:axpy", NUMERICS)
    assert not report.accepted and all("out-of-bounds write" in f for f in report.failures), report.failures


def test_an_off_by_one_mask_is_rejected_as_an_out_of_bounds_write(tmp_path, monkeypatch):
    """``offs <= n`` stores one element past the end whenever n is not a multiple of the block: it was rejected
    only where the write happened to corrupt the CPU heap ("exit code -6: corrupted size vs. prev_size")."""
    candidate = _candidate(tmp_path, monkeypatch, cmp="<=")
    report = verify(candidate, "audit_ref_axpy:axpy", NUMERICS)
    assert not report.accepted and report.failures
    assert all("out-of-bounds write" in f for f in report.failures), report.failures


def test_the_correct_port_and_torch_empty_out_are_still_accepted(tmp_path, monkeypatch):
    """The guard bands change no tensor a candidate sees: ``torch.empty(..., out=t)`` keeps ``t``."""
    prelude = "    scratch = torch.empty(3)\n    torch.empty(5, out=scratch)\n    assert scratch.shape == (5,)\n"
    report = verify(_candidate(tmp_path, monkeypatch, prelude=prelude), "audit_ref_axpy:axpy", NUMERICS)
    assert report.accepted, report.failures


def test_a_candidate_past_its_cpu_limit_is_named_so(tmp_path, monkeypatch):
    """The child killed by RLIMIT_CPU said only "run: exit code -9: "."""
    candidate = _candidate(tmp_path, monkeypatch, prelude="    while True:\n        pass\n")
    config = VerifyConfig(compile=False, seeds=(0,), cpu_s=2, timeout_s=120)
    report = verify(candidate, "audit_ref_axpy:axpy", config)
    assert not report.accepted
    assert report.failures == ["numerics: run: killed by SIGKILL past its CPU-time limit of 2 s "
                               "(or by the out-of-memory killer)"], report.failures


def test_verify_timeout_also_raises_the_cpu_limit(tmp_path, monkeypatch):
    """``--timeout 900`` for a slow kernel still had the child killed at 300 CPU seconds (the fixed default)."""
    seen = {}

    def fake_verify(candidate, reference, config):
        seen["config"] = config
        raise ValueError("stop here")

    monkeypatch.setattr("polyrec.migrate.verify.verify", fake_verify)
    candidate = _candidate(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["migrate", "verify", str(candidate), "--reference", "audit_ref_axpy:axpy",
                                      "--timeout", "900"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["config"].timeout_s == 900 and seen["config"].cpu_s >= 900
