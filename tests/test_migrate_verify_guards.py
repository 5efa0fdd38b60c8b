"""verify's guard bands: stores past tensors from every torch allocator and loads past the end of an input
fail the case; correct ports, ports that view their inputs and inputs that are not contiguous pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrec.migrate.verify import VerifyConfig, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
NUMERICS = VerifyConfig(compile=False, seeds=(0,))
NEIGHBOUR_REF = """import torch

SHAPES = [(1,), (1000,), (4097,)]


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator),)


def neighbour_sum(x):  # out[i] = x[i] + x[i + 1], x[n] taken as 0
    return x + torch.cat([x[1:], x.new_zeros(1)])
"""
TRANSPOSED_REF = """import torch

SHAPES = [(3, 5), (64, 33), (130, 257)]


def make_inputs(shape, generator):  # a transposed [cols, rows] storage: column-major, strides (1, rows)
    return (torch.randn(shape[::-1], generator=generator).t(),)


def double(x):
    return 2 * x
"""
NEIGHBOUR_SUM = """import torch
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    after = tl.load(x_ptr + offs + 1, mask={next_mask}, other=0.0)
    tl.store(out_ptr + offs, x + after, mask=mask)


def run(x):
    out = torch.empty_like(x)
    kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
"""
TRANSPOSED_DOUBLE = """import torch
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


def run(x):
    if x.stride() != (1, x.shape[0]):
        raise ValueError(f"the input's strides were not kept: {x.stride()}")
    flat = x.t().reshape(-1)  # a view of the column-major storage
    out = torch.empty_like(flat)
    kernel[(triton.cdiv(flat.numel(), 1024),)](flat, out, flat.numel(), BLOCK=1024)
    return out.view(x.shape[1], x.shape[0]).t()
"""


COPY_REF = """import torch

SHAPES = [(100,), (1000,), (3000,)]


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator),)


def copy(x):
    return x.clone()
"""
COPY_PAST_THE_END = """import torch
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def run(x):
    out = torch.empty_like(x)
    kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
"""


@pytest.fixture(scope="module")
def refs_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refs")
    (folder / "migrate_ref_copy.py").write_text(COPY_REF)
    (folder / "migrate_ref_neighbours.py").write_text(NEIGHBOUR_REF)
    (folder / "migrate_ref_transposed.py").write_text(TRANSPOSED_REF)
    return folder


@pytest.fixture(autouse=True)
def _references_on_path(monkeypatch, refs_dir):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.syspath_prepend(str(refs_dir))


def _axpy(tmp_path: Path, allocate: str, store_mask: str) -> Path:
    candidate = tmp_path / "axpy_port.py"
    candidate.write_text((HERE / "good_axpy.py").read_text()
                         .replace("out = torch.empty_like(x)", f"out = {allocate}")
                         .replace("tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)",
                                  f"tl.store(out_ptr + offs, 2.0 * x + y, mask={store_mask})"))
    return candidate


@pytest.mark.parametrize("allocate", ["torch.zeros_like(x)", "torch.full(x.shape, 0.0)", "x.new_ones(x.shape)"])
def test_a_store_past_a_tensor_from_a_value_allocator_is_rejected(allocate, tmp_path):
    """Was: only torch.empty* tensors had guard bands; a store one past a torch.zeros output went unseen."""
    report = verify(_axpy(tmp_path, allocate, "offs <= n"), "migrate_ref_ops:axpy", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("a store landed outside" in f and "out-of-bounds write" in f for f in report.failures), report.failures


@pytest.mark.parametrize("allocate", ["torch.zeros_like(x)", "torch.full(x.shape, 0.0)", "x.new_ones(x.shape)"])
def test_a_port_writing_a_value_allocated_output_in_bounds_is_accepted(allocate, tmp_path):
    report = verify(_axpy(tmp_path, allocate, "mask"), "migrate_ref_ops:axpy", NUMERICS)
    assert report.accepted, report.failures


def test_a_load_past_the_end_of_an_input_is_rejected(tmp_path):
    """Was: the read past x's end took whatever the heap held there; now it reads the guard band's poison (the
    float maximum in the first run, where outputs are poisoned with NaN)."""
    candidate = tmp_path / "neighbours.py"
    candidate.write_text(NEIGHBOUR_SUM.format(next_mask="mask"))  # i + 1 < n not checked: loads x[n]
    report = verify(candidate, "migrate_ref_neighbours:neighbour_sum", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("case 0 (shape (1,)" in f and "wrong values" in f and "load outside an input" in f
               for f in report.failures), report.failures


def test_a_port_masking_its_neighbour_load_is_accepted(tmp_path):
    candidate = tmp_path / "neighbours.py"
    candidate.write_text(NEIGHBOUR_SUM.format(next_mask="offs + 1 < n"))
    report = verify(candidate, "migrate_ref_neighbours:neighbour_sum", NUMERICS)
    assert report.accepted, report.failures


def _axpy_storing_also(tmp_path: Path, store: str) -> Path:
    """The good axpy port with one more ``store`` statement after its own store."""
    own = "    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)"
    candidate = tmp_path / "axpy_extra_store.py"
    candidate.write_text((HERE / "good_axpy.py").read_text().replace(own, f"{own}\n    {store}"))
    return candidate


def test_a_store_past_the_end_of_an_input_is_rejected(tmp_path):
    candidate = _axpy_storing_also(tmp_path, "tl.store(x_ptr + n + offs, x, mask=offs < 1)")
    report = verify(candidate, "migrate_ref_ops:axpy", NUMERICS)
    assert not report.accepted
    assert any("a store landed outside" in f for f in report.failures), report.failures


@pytest.mark.parametrize("past", [2047, 8191])
def test_a_store_a_whole_block_past_the_end_of_an_input_is_rejected(past, tmp_path):
    """Was: bands of 4 KiB, so a store a block of 2048 or 8192 float32 out (an index off by one block) went past
    the band into whatever the heap held there, unseen."""
    candidate = _axpy_storing_also(tmp_path, f"tl.store(x_ptr + n + {past} + offs, x, mask=offs < 1)")
    report = verify(candidate, "migrate_ref_ops:axpy", NUMERICS)
    assert not report.accepted
    assert any("a store landed outside" in f for f in report.failures), report.failures


def test_a_port_writing_its_input_in_place_is_still_named_for_that(tmp_path):
    """Inside an input's bounds a store is no overrun: the verdict stays 'wrote to its input(s)'."""
    candidate = _axpy_storing_also(tmp_path, "tl.store(y_ptr + offs, x, mask=mask)")
    report = verify(candidate, "migrate_ref_ops:axpy", NUMERICS)
    assert not report.accepted
    assert any("wrote to its input(s) [1]" in f for f in report.failures), report.failures
    assert not any("store landed outside" in f for f in report.failures), report.failures


def test_inputs_keep_their_strides_and_may_be_viewed(tmp_path):
    candidate = tmp_path / "transposed.py"
    candidate.write_text(TRANSPOSED_DOUBLE)
    report = verify(candidate, "migrate_ref_transposed:double", NUMERICS)
    assert report.accepted, report.failures


def test_a_copy_one_past_both_ends_is_rejected(tmp_path):
    """``offs <= n`` on the load and the store copies the input's band into the output's: with the same poison in
    both (NaN into NaN, then the float maximum into itself) the output's band was left as it was, and the port
    accepted. The inputs' bands hold the other run's poison."""
    candidate = tmp_path / "copy_port.py"
    candidate.write_text(COPY_PAST_THE_END)
    report = verify(candidate, "migrate_ref_copy:copy", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("a store landed outside" in f for f in report.failures), report.failures
