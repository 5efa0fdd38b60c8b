"""What verify checks beyond the declared cases: shapes derived from SHAPES, a second poison for outputs the
first can match, and the fp32 tolerance's two sides (long fp32 reductions pass, lower-precision rounding fails)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from polyrec.migrate.cases import above, derived_shapes, make_cases
from polyrec.migrate.verify import TOLERANCES, VerifyConfig, compare, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
NUMERICS = VerifyConfig(compile=False, seeds=(0,))
ALIGNED = [(256,), (1024,), (4096,)]  # migrate_ref_aligned.SHAPES
#: torch.testing.assert_close's float32 default (atol, rtol): https://pytorch.org/docs/stable/testing.html
TORCH_TESTING_FP32 = (1e-5, 1.3e-6)


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


# --- shapes derived from SHAPES ---------------------------------------------------------------------------

def test_derived_shapes_add_tails_and_size_one_and_one_size_above_the_declared_sizes():
    shapes = derived_shapes(ALIGNED, seed=0)
    assert {(255,), (257,), (1023,), (1025,), (4095,), (1,), (4097,)} <= set(shapes)
    assert not set(shapes) & set(ALIGNED) and len(shapes) == len(set(shapes))
    assert [n for (n,) in shapes if not 1 <= n <= 4096] == [4097]  # past the largest declared size: one


@pytest.mark.parametrize(("top", "size"), [(1, 2), (2, 3), (70, 129), (1000, 1025), (4096, 4097), (4097, 8193)])
def test_the_size_above_is_one_past_the_smallest_power_of_two_holding_the_largest(top, size):
    assert above(top) == size <= 2 * top


def test_sizes_above_raise_one_free_dim_at_a_time_from_the_shape_declaring_its_largest():
    """Each costs at most twice a declared shape: raising all three dims of a matmul at once would cost 8x."""
    declared = [(32, 32, 32), (64, 48, 40), (70, 65, 33)]  # migrate_ref_mm.SHAPES: (m, n, k), all free
    tops = [max(dims) for dims in zip(*declared)]
    beyond = [s for s in derived_shapes(declared, seed=0) if any(n > top for n, top in zip(s, tops))]
    assert beyond == [(129, 65, 33), (70, 129, 33), (64, 48, 65)]
    assert all(d == 128 for _, d in derived_shapes([(1024, 128), (4096, 128), (3000, 128)], seed=0))  # fixed dim


WRONG_ABOVE_THE_LARGEST = {  # axpy ports right on every size up to 4096, the largest of migrate_ref_aligned.SHAPES
    "one program": "kernel[(1,)](x, y, out, 0, n, BLOCK=4096)",  # a single block covers the whole tensor
    "grid capped": "kernel[(min(triton.cdiv(n, 256), 16),)](x, y, out, 256, n, BLOCK=256)",  # 16 blocks, no loop
}
AXPY_PORT = """import torch
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, y_ptr, out_ptr, step, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * step + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    {launch}
    return out
"""


@pytest.mark.parametrize("wrong", sorted(WRONG_ABOVE_THE_LARGEST))
def test_port_right_only_up_to_the_largest_declared_size_is_rejected(wrong, tmp_path):
    candidate = tmp_path / "axpy_port.py"
    candidate.write_text(AXPY_PORT.format(launch=WRONG_ABOVE_THE_LARGEST[wrong]))
    report = verify(candidate, "migrate_ref_aligned:axpy", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert [f.split(": ")[1] for f in report.failures] == ["case 10 (derived shape (4097,), seed 0)"], report.failures


def test_derived_shapes_keep_dims_every_declared_shape_agrees_on():
    declared = [(1024, 128), (4096, 128), (3000, 128)]
    shapes = derived_shapes(declared, seed=3)
    assert shapes and all(d == 128 for _, d in shapes)
    assert derived_shapes([(7, 3)], seed=3) == []  # one shape of its rank: no dim is known to be free
    tagged = derived_shapes([(64, "fp16"), (128, "bf16"), (256, "fp16")], seed=3)  # not a size: kept
    assert tagged and all(tag in ("fp16", "bf16") for _, tag in tagged)


def test_derived_shapes_are_seeded():
    assert derived_shapes(ALIGNED, seed=5) == derived_shapes(ALIGNED, seed=5)
    assert len({tuple(derived_shapes(ALIGNED, seed=s)) for s in range(8)}) > 1  # the random size moves


def test_port_wrong_only_on_undeclared_sizes_is_rejected():
    """A grid of n // BLOCK leaves the tail unwritten; every declared size is a multiple of the block: accepted."""
    report = verify(HERE / "adv_floor_grid.py", "migrate_ref_aligned:axpy", NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any("derived shape (257,), seed 0): NaN in output" in f for f in report.failures), report.failures
    assert verify(HERE / "good_axpy.py", "migrate_ref_aligned:axpy", NUMERICS).accepted


def test_make_inputs_may_refuse_a_derived_shape():
    def make_inputs(shape, generator):
        if shape[0] < 8:
            raise ValueError("8 elements at least")
        return (torch.randn(shape, generator=generator),)

    reference = types.SimpleNamespace(SHAPES=[(8,), (64,), (1000,)], make_inputs=make_inputs)
    cases = make_cases(reference, (0,))
    assert [c.shape for c in cases[:3]] == [(8,), (64,), (1000,)] and all(not c.derived for c in cases[:3])
    assert {(9,), (63,), (65,), (999,)} <= {c.shape for c in cases[3:]}
    assert all(c.derived and c.shape[0] >= 8 for c in cases[3:])  # (7,) and (1,) left out
    reference.SHAPES = [(7,), (64,), (1000,)]
    with pytest.raises(ValueError, match="8 elements at least"):  # a declared shape it refuses is bad input
        make_cases(reference, (0,))


# --- a second poison ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "reference"), [
    ("good_is_positive.py", "migrate_ref_masks:is_positive"),  # bool output from torch.empty
    ("good_saturate.py", "migrate_ref_masks:saturate"),  # int8 output holding the integer maximum
    ("good_log.py", "migrate_ref_masks:logarithm"),  # float output holding NaN
])
def test_fully_written_outputs_the_first_poison_can_match_are_accepted(name, reference):
    report = verify(HERE / name, reference, NUMERICS)
    assert report.accepted, report.failures


@pytest.mark.parametrize(("name", "reference", "why"), [
    ("adv_bool_writes_true_only.py", "migrate_ref_masks:is_positive", "wrong values"),  # False left: poison True
    ("adv_bool_writes_false_only.py", "migrate_ref_masks:is_positive", "left unwritten"),  # True left: poison False
    ("adv_int_skips_max.py", "migrate_ref_masks:saturate", "left unwritten"),  # 127 left: integer minimum
    ("adv_float_skips_nan.py", "migrate_ref_masks:logarithm", "left unwritten"),  # NaN left: float maximum
])
def test_outputs_left_unwritten_where_one_poison_matches_are_rejected(name, reference, why):
    report = verify(HERE / name, reference, NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail"
    assert any(why in f for f in report.failures), report.failures


# --- the fp32 tolerance -------------------------------------------------------------------------------------

def _matmul(a, b):
    return a @ b


def _chunked_fp32_matmul(a, b, chunk: int = 32):
    """a @ b as a Triton K-loop computes it: one fp32 accumulator, ``chunk`` terms of K at a time."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], chunk):
        acc += a[:, k:k + chunk] @ b[k:k + chunk]
    return acc


@pytest.mark.parametrize("k", [1024, 3456, 16384])
def test_fp32_tolerance_admits_long_fp32_reductions(k, monkeypatch):
    """A correct fp32 K-loop drifts from the float64 result as K grows; torch.testing's default rejects it."""
    gen = torch.Generator().manual_seed(k)
    inputs = (torch.randn((32, k), generator=gen), torch.randn((k, 32), generator=gen))
    out = _chunked_fp32_matmul(*inputs)
    assert compare(out, inputs, _matmul, "k-loop") is None
    if k > 1024:
        monkeypatch.setitem(TOLERANCES, "torch.float32", TORCH_TESTING_FP32)
        assert "wrong values" in compare(out, inputs, _matmul, "k-loop")


def _tf32(x):
    """``x`` rounded to tf32's 10-bit mantissa (nearest, ties to even), kept in fp32."""
    bits = x.view(torch.int32)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("rounding", [_tf32, lambda x: x.half().float(), lambda x: x.bfloat16().float()],
                         ids=["tf32", "float16", "bfloat16"])
def test_fp32_tolerance_rejects_a_lower_precision_rounding(rounding):
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(4096, generator=gen), torch.randn(4096, generator=gen))
    out = rounding(2.0 * inputs[0] + inputs[1])
    assert "wrong values" in compare(out, inputs, lambda x, y: 2.0 * x + y, "rounded")
