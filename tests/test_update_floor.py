"""benchmarks/update_floor.py's kernel through the Triton interpreter: each mode does what it says, on the
rows it is given and no others (the floor would be meaningless if a mode skipped work)."""

from __future__ import annotations

import pytest
import torch
import triton

from benchmark_util import load_benchmark

floor = load_benchmark("update_floor")
MODES, ideal_update_kernel, mode_bytes = floor.MODES, floor.ideal_update_kernel, floor.mode_bytes

DIM, ROWS, UNIQUE, SLICES = 8, 40, 13, 30


def _run(mode: str, r: int = 4, layout: str = "separate", dim: int = DIM):
    """The kernel once over UNIQUE sorted rows of ``dim`` elements (read as the next power of two of lanes); the
    table comes back as [ROWS, stride] (state columns and padding included) and the separate state array beside
    it."""
    gen = torch.Generator().manual_seed(1)
    stride = floor.row_stride(layout, dim)
    weights = torch.randn(ROWS * stride, generator=gen)
    weights.view(ROWS, stride)[:, dim:] = torch.rand(ROWS, stride - dim, generator=gen)  # state >= 0 inline
    state = torch.rand(ROWS, generator=gen)
    rows = torch.randperm(ROWS, generator=gen)[:UNIQUE].sort().values
    src = torch.randint(0, SLICES, (UNIQUE,), generator=gen)
    grad = torch.randn(SLICES * dim, generator=gen)
    programs = -(-UNIQUE // r)
    sink = torch.full((programs * dim + 1,), float("nan"))  # one element past the sums: must stay unwritten
    w0, s0 = weights.clone(), state.clone()
    ideal_update_kernel[(programs,)](weights, state, grad, rows, src, sink, UNIQUE, 0.1, 1e-8, D=dim,
                                     BLOCK=triton.next_power_of_2(dim), R=r, MODE=MODES[mode], STRIDE=stride,
                                     STATE=floor.LAYOUTS[layout][1], num_warps=1)
    return (w0.view(ROWS, stride), s0, weights.view(ROWS, stride), state, rows, src, grad.view(SLICES, dim),
            sink)


@pytest.mark.parametrize("dim", [DIM, 5])
def test_read_sums_the_rows_of_each_program_and_writes_nothing(dim):
    w0, s0, w, s, rows, _, _, sink = _run("read", dim=dim)
    want = torch.stack([w0[rows[i:i + 4], :dim].sum(0) for i in range(0, UNIQUE, 4)]).flatten()
    torch.testing.assert_close(sink[:-1], want)
    assert sink[-1].isnan() and torch.equal(w, w0) and torch.equal(s, s0)


def test_rmw_touches_exactly_the_given_rows():
    w0, s0, w, s, rows, _, _, _ = _run("rmw")
    hit = torch.zeros(ROWS, dtype=torch.bool)
    hit[rows] = True
    torch.testing.assert_close(w[hit], w0[hit] + 1)
    torch.testing.assert_close(s[hit], s0[hit] + 1)
    assert torch.equal(w[~hit], w0[~hit]) and torch.equal(s[~hit], s0[~hit])


@pytest.mark.parametrize("r", [2, 4, 16])
def test_update_is_rowwise_adagrad_in_float64(r):
    w0, s0, w, s, rows, src, grad, _ = _run("update", r)
    g = grad[src].double()
    s_want = s0[rows].double() + (g * g).mean(1)
    w_want = w0[rows].double() - 0.1 * g / (s_want.sqrt() + 1e-8)[:, None]
    torch.testing.assert_close(s[rows].double(), s_want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w[rows].double(), w_want, rtol=1e-5, atol=1e-5)


def test_a_dim_between_powers_of_two_updates_its_rows_and_leaves_their_neighbours():
    """Rows of 5 elements packed one after another, read as 8 lanes: the masked lanes would land on the next row,
    and the sorted rows include neighbours."""
    w0, s0, w, s, rows, src, grad, _ = _run("update", 4, dim=5)
    hit = torch.zeros(ROWS, dtype=torch.bool)
    hit[rows] = True
    g = grad[src].double()
    s_want = s0[rows].double() + (g * g).mean(1)
    torch.testing.assert_close(s[rows].double(), s_want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w[rows].double(), w0[rows].double() - 0.1 * g / (s_want.sqrt() + 1e-8)[:, None],
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(w[~hit], w0[~hit]) and torch.equal(s[~hit], s0[~hit])
    assert bool((rows[1:] == rows[:-1] + 1).any())  # the case the mask is for


@pytest.mark.parametrize("layout", ["inline-528", "inline-544"])
def test_inline_state_is_the_element_after_the_row_and_the_padding_stays(layout):
    w0, s0, w, s, rows, src, grad, _ = _run("update", 4, layout)
    hit = torch.zeros(ROWS, dtype=torch.bool)
    hit[rows] = True
    g = grad[src].double()
    s_want = w0[rows, DIM].double() + (g * g).mean(1)
    torch.testing.assert_close(w[rows, DIM].double(), s_want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w[rows, :DIM].double(),
                               w0[rows, :DIM].double() - 0.1 * g / (s_want.sqrt() + 1e-8)[:, None],
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(w[~hit], w0[~hit]) and torch.equal(w[:, DIM + 1:], w0[:, DIM + 1:])
    assert torch.equal(s, s0)  # the separate array is not the state here


@pytest.mark.parametrize("layout", ["no-state", "padded-544"])
def test_no_state_writes_the_rows_alone(layout):
    w0, s0, w, s, rows, _, _, _ = _run("rmw", 4, layout)
    hit = torch.zeros(ROWS, dtype=torch.bool)
    hit[rows] = True
    torch.testing.assert_close(w[hit], w0[hit] + 1)
    assert torch.equal(w[~hit], w0[~hit]) and torch.equal(s, s0)


def test_row_stride_pads_to_the_named_bytes():
    assert floor.row_stride("separate", 128) == floor.row_stride("no-state", 128) == 128
    assert 4 * floor.row_stride("inline-528", 128) == 528 and 4 * floor.row_stride("inline-544", 128) == 544
    assert floor.row_stride("inline-528", DIM) == DIM + 1  # room for the state at any dim
    assert floor.row_stride("padded-544", 128) == 136


def test_bytes_count_rows_both_ways_state_and_gradient():
    assert mode_bytes("read", 10, 128, 4) == 10 * 512
    assert mode_bytes("rmw", 10, 128, 4) == 10 * (1024 + 8)
    assert mode_bytes("update", 10, 128, 2) == 10 * (1024 + 8 + 256)
    assert mode_bytes("rmw", 10, 128, 4, "inline-544") == 10 * (1024 + 8)  # padding not counted
    assert mode_bytes("rmw", 10, 128, 4, "no-state") == 10 * 1024


def test_the_orders_visit_the_same_distinct_rows_and_read_the_slices_as_named():
    orders = floor.visit_orders(1000, 300, torch.Generator().manual_seed(3))
    ascending, shuffled = orders["sorted"][0], orders["shuffled"][0]
    assert torch.equal(ascending, shuffled.sort().values) and ascending.unique().numel() == 300
    assert bool((ascending[1:] > ascending[:-1]).all()) and not torch.equal(ascending, shuffled)
    assert torch.equal(orders["bag-major"][0], shuffled)
    assert torch.equal(orders["bag-major"][1], torch.arange(300))
    assert torch.equal(orders["sorted"][1], orders["shuffled"][1])


def test_chunked_orders_group_by_gradient_window_and_sort_rows_within():
    orders = floor.visit_orders(1000, 300, torch.Generator().manual_seed(4))
    for k in floor.CHUNKS:
        rows, slices = orders[f"chunked-{k}"]
        window = -(-floor.GRAD_SLICES // k)
        chunk = slices // window
        assert bool((chunk[1:] >= chunk[:-1]).all())
        same = chunk[1:] == chunk[:-1]
        assert bool((rows[1:][same] > rows[:-1][same]).all())
        pairs = sorted(zip(rows.tolist(), slices.tolist()))
        assert pairs == sorted(zip(orders["shuffled"][0].tolist(), orders["shuffled"][1].tolist()))


def test_the_summary_keeps_each_case_s_fastest_tile():
    rows = [{"mode": "rmw", "grad": "float32", "order": o, "rows_per_program": r, "warps": 1, "ms": ms,
             "TBps": 10 / ms} for o, r, ms in (("sorted", 4, 2.0), ("sorted", 8, 1.0), ("shuffled", 4, 3.0))]
    got = floor.summarize(rows, copy=20e12)
    assert got["rmw_float32_sorted_best"]["tile"] == "8x w1"
    assert got["rmw_float32_shuffled_best"]["frac_of_copy"] == pytest.approx(10 / 3 / 20)
