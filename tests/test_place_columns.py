"""The pooled-output placement kernels (``polyrec.kernels.place_columns``) against float64 through
the Triton interpreter, their torch path, ``PlaceColumns``' forward/backward consistency, the tile
tables, and the compile fit on sm_90 / gfx942 / gfx950."""

from __future__ import annotations

import random

import pytest
import torch

from compile_util import COMPILE_DEVICES, INTERPRETING, compile_only, unfit_jobs

from polyrec.kernels import place_columns
from polyrec.kernels.place_columns import PlaceConfig, column_layout, gather, place, select_config
from polyrec.runtime.pooled_exchange import PlaceColumns

needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs Triton kernels through TRITON_INTERPRET=1")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
B = 37  # odd: ragged row blocks
DIMS = (3, 8, 130)  # source ranks' block widths
#: Tiles of 4 columns and 8 rows: several row blocks (the last ragged) and tiles cut inside runs.
SMALL_TILE = 4
SMALL_ROWS = 8


def _copy_cols(dims: tuple[int, ...], seed: int) -> list[list[int]]:
    """Every output column once: the columns cut into runs of 1..40, shuffled, dealt to the ranks in
    order (so runs also split across ranks)."""
    rnd = random.Random(seed)
    runs, start, total = [], 0, sum(dims)
    while start < total:
        width = min(rnd.randint(1, 40), total - start)
        runs.append(list(range(start, start + width)))
        start += width
    rnd.shuffle(runs)
    flat = [c for run in runs for c in run]
    ends = [sum(dims[:r + 1]) for r in range(len(dims))]
    return [flat[e - d:e] for d, e in zip(dims, ends)]


def _add_cols(dims: tuple[int, ...], out_dim: int, seed: int) -> list[list[int]]:
    """Runs at random places of [0, out_dim - 5) (overlapping across and within ranks: partial sums
    meet), so the last 5 columns and others stay uncovered."""
    rnd = random.Random(seed)
    cols = []
    for d in dims:
        rank: list[int] = []
        while len(rank) < d:
            width = min(rnd.randint(1, 40), d - len(rank), out_dim - 5)
            start = rnd.randint(0, out_dim - 5 - width)
            rank += range(start, start + width)
        cols.append(rank)
    cols[1][1] = cols[1][0]  # one rank twice on the same column
    return cols


def _layout(add: bool, small: bool, seed: int = 0):
    out_dim = sum(DIMS) + (20 if add else 0)
    cols = _add_cols(DIMS, out_dim, seed) if add else _copy_cols(DIMS, seed)
    return column_layout(DIMS, cols, out_dim, add, "cpu", block_n=SMALL_TILE if small else None), cols


def _config(block_n: int) -> PlaceConfig | None:
    return PlaceConfig(block_m=SMALL_ROWS, block_n=block_n, num_warps=1, vec=1) if block_n == SMALL_TILE else None


def _blocks(flat: torch.Tensor, b: int) -> list[torch.Tensor]:
    return [x.view(b, d) for x, d in zip(flat.split([b * d for d in DIMS]), DIMS)]


def _place_reference(flat: torch.Tensor, b: int, cols, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 sums and sums of magnitudes per output column."""
    ref = torch.zeros(b, out_dim, dtype=torch.float64)
    mag = torch.zeros(b, out_dim, dtype=torch.float64)
    for block, rank_cols in zip(_blocks(flat, b), cols):
        ref.index_add_(1, torch.tensor(rank_cols), block.double())
        mag.index_add_(1, torch.tensor(rank_cols), block.double().abs())
    return ref, mag


def _fresh(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@needs_interpreter
@pytest.mark.parametrize("small", [False, True], ids=["selected", "small-tiles"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_place_copy_matches_float64(dtype, small):
    layout, cols = _layout(add=False, small=small, seed=1)
    flat = _fresh(B * sum(DIMS), dtype, 2)
    out = torch.full((B, layout.out_dim), float("nan"), dtype=dtype)
    got = place(flat, B, layout, out=out, config=_config(layout.place_block_n))
    ref, _ = _place_reference(flat, B, cols, layout.out_dim)
    assert got is out
    assert torch.equal(got, ref.to(dtype))


@needs_interpreter
@pytest.mark.parametrize("small", [False, True], ids=["selected", "small-tiles"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_place_add_matches_float64(dtype, small):
    layout, cols = _layout(add=True, small=small, seed=3)
    flat = _fresh(B * sum(DIMS), dtype, 4)
    out = torch.full((B, layout.out_dim), float("nan"), dtype=dtype)
    got = place(flat, B, layout, out=out, config=_config(layout.place_block_n)).double()
    ref, mag = _place_reference(flat, B, cols, layout.out_dim)
    uncovered = mag.sum(0) == 0
    assert uncovered[-5:].all() and (mag > 0).any()
    assert torch.equal(got[:, uncovered], torch.zeros_like(got[:, uncovered]))
    # fp32 sums of <= 4 terms rounded once (the interpreter truncates bf16: < 1 ulp)
    assert ((got - ref).abs() <= 2 * torch.finfo(dtype).eps * mag).all()


@needs_interpreter
@pytest.mark.parametrize("grad_layout", ["contiguous", "wider-rows", "column-major"])
@pytest.mark.parametrize("add", [False, True], ids=["copy", "add"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_matches_float64(dtype, add, grad_layout):
    layout, cols = _layout(add=add, small=grad_layout == "wider-rows", seed=5)
    base = _fresh((B, layout.out_dim + 6), dtype, 6)
    grad = {"contiguous": base[:, :layout.out_dim].contiguous(), "wider-rows": base[:, 3:3 + layout.out_dim],
            "column-major": base[:, :layout.out_dim].t().contiguous().t()}[grad_layout]
    config = _config(layout.gather_block_n)
    for scale in (0.5, 1 / 3):
        out = torch.full((B * sum(DIMS),), float("nan"), dtype=dtype)
        got = gather(grad, B, layout, scale, out=out, config=config)
        ref = torch.cat([(grad.double()[:, c] * scale).reshape(-1) for c in cols])
        assert got is out
        if scale == 0.5:  # exact in every dtype
            assert torch.equal(got.double(), ref)
        else:
            assert ((got.double() - ref).abs() <= torch.finfo(dtype).eps * ref.abs()).all()


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_kernels_equal_the_torch_path(monkeypatch, dtype):
    """fp32 sums in the same order and fp32 products: bit-equal (bf16 only under the interpreter's
    truncation differs, see the module docstring)."""
    for add in (False, True):
        layout, _ = _layout(add=add, small=False, seed=7)
        flat, grad = _fresh(B * sum(DIMS), dtype, 8), _fresh((B, layout.out_dim), dtype, 9)
        kernel = place(flat, B, layout), gather(grad, B, layout, 1 / 3)
        with monkeypatch.context() as m:
            m.setattr(place_columns, "interpreting", lambda: False)
            torch_path = place(flat, B, layout), gather(grad, B, layout, 1 / 3)
        assert torch.equal(kernel[0], torch_path[0]) and torch.equal(kernel[1], torch_path[1])


@needs_interpreter
@pytest.mark.parametrize("add", [False, True], ids=["copy", "add"])
def test_place_columns_backward_is_the_scaled_adjoint(add):
    """<place(x), g> * scale == <x, d/dx> through autograd (fp32, kernels)."""
    layout, _ = _layout(add=add, small=False, seed=11)
    x = _fresh(B * sum(DIMS), torch.float32, 12).requires_grad_()
    g = _fresh((B, layout.out_dim), torch.float32, 13)
    out = PlaceColumns.apply(x, B, layout, 0.25)
    out.backward(g)
    lhs = (out.detach().double() * g.double()).sum() * 0.25
    rhs = (x.detach().double() * x.grad.double()).sum()
    assert abs(lhs - rhs) <= 1e-6 * (out.detach().double() * g.double()).abs().sum()


@pytest.mark.parametrize("add", [False, True], ids=["copy", "add"])
def test_place_columns_gradcheck_float64(add):
    dims, b = (2, 3, 5), 3
    cols = [[4, 0], [1, 2, 3], [5, 6, 7, 8, 9]] if not add else [[1, 2], [0, 1, 2], [2, 3, 4, 5, 5]]
    layout = column_layout(dims, cols, 10 if not add else 8, add, "cpu")
    x = torch.randn(b * sum(dims), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: PlaceColumns.apply(t, b, layout, 1.0), (x,))


def _mlperf_table_wise() -> tuple[list[int], list[list[int]]]:
    """26 features of 128 columns dealt to 2 ranks in an irregular order, as a table-wise plan does."""
    owner = [0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1]
    cols = [[c for f in range(26) if owner[f] == r for c in range(128 * f, 128 * f + 128)] for r in (0, 1)]
    return [len(c) for c in cols], cols


def test_table_wise_features_take_full_aligned_tiles():
    dims, cols = _mlperf_table_wise()
    layout = column_layout(dims, cols, 3328, False, "cpu")
    assert (layout.place_block_n, layout.gather_block_n, layout.align) == (128, 128, 16)
    assert layout.place_tiles.shape == (26, 6) and layout.gather_tiles.shape == (26, 5)
    assert (layout.place_tiles[:, 1] == 128).all() and (layout.place_tiles[:, 2] == 1).all()
    bf16_nvidia = select_config(128, layout.align, 2, 32)
    assert (bf16_nvidia.block_m, bf16_nvidia.num_warps, bf16_nvidia.vec) == (32, 4, 8)
    assert select_config(128, layout.align, 4, 64).num_warps == 2 and select_config(128, 1, 4, 64).vec == 1


def test_tile_width_follows_the_runs():
    narrow = column_layout([48], [[c ^ 1 for c in range(48)]], 48, False, "cpu")  # runs of 1 column
    assert narrow.place_block_n == 16 and narrow.align == 1
    mixed = column_layout([64, 192], [list(range(128, 192)), list(range(128)) + list(range(192, 256))], 256,
                          False, "cpu")
    assert mixed.place_block_n == 64  # runs of 128, 64, 64 columns: 128-wide tiles would be 384 lanes for 256
    # row-wise halves of every column: one segment per output tile, two sources each
    rows = column_layout([256, 256], [list(range(256))] * 2, 256, True, "cpu")
    assert rows.place_tiles.shape == (2, 9) and (rows.place_tiles[:, 2] == 2).all()
    assert rows.gather_tiles.shape == (4, 5)


@pytest.mark.parametrize(("dims", "cols", "out_dim", "add", "message"), [
    ((2, 2), [[0, 1], [1, 2]], 4, False, "column 1 has 2 sources"),
    ((2, 1), [[0, 1], [3]], 4, False, "column 2 has 0 sources"),
    ((2, 2), [[0, 1], [2, 4]], 4, True, "names output column 4 outside"),
    ((2, 2), [[0, 1], [2]], 4, True, "rank 1 has 1 output columns for dims"),
    ((2,), [[0, 1], [2]], 4, True, "2 column lists for 1 source ranks"),
])
def test_bad_layout_is_named(dims, cols, out_dim, add, message):
    with pytest.raises(ValueError, match=message):
        column_layout(dims, cols, out_dim, add, "cpu")


def test_bad_inputs_are_named():
    layout, _ = _layout(add=False, small=False)
    flat = torch.zeros(B * sum(DIMS))
    with pytest.raises(ValueError, match="flat must be 1-D"):
        place(flat[:-1], B, layout)
    with pytest.raises(ValueError, match="flat must be contiguous"):
        place(torch.zeros(2 * B * sum(DIMS))[::2], B, layout)
    with pytest.raises(TypeError, match="dtype torch.int32 is not supported"):
        place(flat.int(), B, layout)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        place(flat, B, layout, out=torch.zeros(B, layout.out_dim + 1))
    with pytest.raises(ValueError, match="grad must be"):
        gather(torch.zeros(B, layout.out_dim + 1), B, layout, 1.0)
    meta = column_layout(DIMS, _copy_cols(DIMS, 0), sum(DIMS), False, "meta")
    with pytest.raises(ValueError, match="the layout's tables on meta"):
        place(flat, B, meta)
    with pytest.raises(ValueError, match="does not fit the layout"):
        place(flat.bfloat16(), B, layout, config=PlaceConfig(block_m=8, block_n=layout.place_block_n, num_warps=1,
                                                              vec=16))


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(place_columns.compile_jobs, name)
    assert not failures, "\n".join(failures)


@compile_only
@pytest.mark.parametrize(("backend", "arch", "warp", "vector_load"), [
    ("cuda", 90, 32, "ld.global.v4"), ("hip", "gfx942", 64, "global_load_dwordx4")])
def test_aligned_tiles_move_16_bytes_per_access(backend, arch, warp, vector_load):
    """The alignment hints on the table entries turn the bf16 accesses into 16-byte vectors."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for kind in ("place", "gather"):
        job = place_columns.compile_job(kind, torch.bfloat16, select_config(128, 16, 2, warp))
        names = list(job.signature)
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in job.divisible_by_16}
        compiled = triton.compile(ASTSource(job.kernel, signature=job.signature, constexprs=job.constexprs,
                                            attrs=attrs), target=GPUTarget(backend, arch, warp),
                                  options={"num_warps": job.num_warps, "num_stages": job.num_stages})
        asm = compiled.asm["ptx" if backend == "cuda" else "amdgcn"]
        assert vector_load in asm, f"{kind}: no {vector_load} in the {arch} assembly"
