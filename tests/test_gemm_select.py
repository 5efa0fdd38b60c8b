"""GEMM selection and performance model: no timers, deterministic, fast, sane, feasible."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import pytest

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import catalog, get_device
from polyrec.kernels import gemm_select
from polyrec.kernels.gemm_configs import GemmConfig, config_space, dlrm_suite, pass_partial_rows, pass_row_blocks
from polyrec.kernels.gemm_select import bucket, select_gemm
from polyrec.perfmodel.gemm import GemmProblem, estimate
from polyrec.perfmodel.gemm_footprint import footprint

DEVICES = [name for name in ("H200", "MI300X", "MI350X") if name in catalog()]
_perf_counter = time.perf_counter  # taken before any test can patch it


def test_selector_never_calls_a_timer(monkeypatch):
    import torch
    import triton.testing

    def forbidden(*args, **kwargs):
        raise AssertionError("the selector called a timer")

    for module, name in ((time, "perf_counter"), (time, "time"), (time, "monotonic"),
                         (time, "perf_counter_ns"), (time, "time_ns"), (triton.testing, "do_bench"),
                         (torch.cuda, "Event"), (torch.cuda, "synchronize")):
        monkeypatch.setattr(module, name, forbidden)
    gemm_select.clear_cache()
    for name in DEVICES:
        for shape in dlrm_suite():
            choice = select_gemm(shape.m, shape.n, shape.k, "bf16", get_device(name), epilogue=shape.epilogue)
            assert choice.backend in ("triton", "library")


def test_selection_is_deterministic():
    spec = get_device("H200")
    first = [select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue) for s in dlrm_suite()]
    gemm_select.clear_cache()
    again = [select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue) for s in reversed(dlrm_suite())]
    assert first == list(reversed(again))


def test_selection_time_budget():
    spec = get_device("H200")
    gemm_select.clear_cache()
    select_gemm(1, 1, 1, "bf16", spec)  # load the ceilings once
    cold = []
    for s in dlrm_suite():
        start = _perf_counter()
        select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue)
        cold.append(_perf_counter() - start)
    # Cold: one model evaluation per config of the space (~180 on the H200, ~10 us each).
    assert max(cold) < 0.05, f"slowest cold selection {max(cold) * 1e3:.1f} ms"
    warm = []
    for _ in range(200):
        for s in dlrm_suite()[:5]:
            start = _perf_counter()
            select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue)
            warm.append(_perf_counter() - start)
    assert statistics.median(warm) < 100e-6, f"median warm selection {statistics.median(warm) * 1e6:.1f} us"


def test_bucket_keeps_tile_counts():
    for x in (1, 13, 17, 512, 3456, 8192):
        assert bucket(x) % 16 == 0 and bucket(x) >= x and bucket(x) - x < 16
        assert all(-(-bucket(x) // t) == -(-x // t) for t in (16, 32, 64, 128, 256))
    assert bucket(65536) == 65536 and bucket(65537) > 65536


@pytest.mark.parametrize("name", DEVICES)
def test_time_grows_with_k(name):
    spec = get_device(name)
    ceil = ceilings(spec)
    config = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=2)
    times = [estimate(GemmProblem(m=4096, n=4096, k=k, dtype="bf16"), config, spec, ceil).parts["gpu"]
             for k in (256, 512, 1024, 4096, 16384)]
    assert all(a < b for a, b in zip(times, times[1:])), times


def test_a_call_takes_at_least_its_launches_host_time():
    """Tiny GEMMs cost the host launch floor (plus the reduction pass's with split-K); the library
    without an epilogue pass has none."""
    from polyrec.perfmodel.gemm import TRITON_GEMM_HOST_S, TRITON_PASS_HOST_S

    spec = get_device("H200")
    ceil = ceilings(spec)
    tiny = GemmProblem(m=64, n=64, k=64, dtype="bf16")
    one = estimate(tiny, GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=2), spec, ceil)
    two = estimate(GemmProblem(m=64, n=64, k=4096, dtype="bf16"),
                   GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=2, split_k=4), spec, ceil)
    assert one.parts["gpu"] < one.seconds == TRITON_GEMM_HOST_S
    assert two.parts["gpu"] < two.seconds == TRITON_GEMM_HOST_S + TRITON_PASS_HOST_S
    choice = select_gemm(64, 64, 64, "bf16", spec)
    assert choice.backend == "library" and choice.library_seconds < TRITON_PASS_HOST_S
    assert choice.gpu_seconds == choice.library_seconds


def test_bigger_device_is_faster():
    spec = get_device("H200")
    half = dataclasses.replace(spec, name="H200-half", compute_units=spec.compute_units // 2,
                               peak_flops={k: v / 2 for k, v in spec.peak_flops.items()})
    problem = GemmProblem(m=16384, n=4096, k=4096, dtype="bf16")
    best = {}
    for s in (spec, half):
        best[s.name] = gemm_select.rank_configs(problem, s, ceilings(spec))[0][0]
    assert best["H200"] < best["H200-half"]


@pytest.mark.parametrize("name", [n for n in ("MI300X",) if n in DEVICES])
def test_config_over_lds_limit_is_infeasible_and_excluded(name):
    spec = get_device(name)
    big = GemmConfig(block_m=256, block_n=256, block_k=128, num_warps=8, num_stages=2, matrix_instr_nonkdim=16)
    fp = footprint(big, "bf16", spec)
    assert fp.smem_bytes > spec.smem_per_block and not fp.fits
    assert big not in config_space(spec, "bf16")
    assert estimate(GemmProblem(m=4096, n=4096, k=4096, dtype="bf16"), big, spec, ceilings(spec)).seconds == float("inf")
    assert all(footprint(c, "bf16", spec).smem_bytes <= spec.smem_per_block for c in config_space(spec, "bf16"))


def test_library_only_without_fusion_or_when_predicted_faster():
    spec = get_device("H200")
    for s in dlrm_suite():
        choice = select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue)
        if choice.backend == "library":
            assert choice.library_seconds <= choice.triton_seconds
        else:  # a tie of call times (both on the host floor) goes to the shorter GPU time
            assert choice.triton_seconds <= choice.library_seconds


def test_h200_space_is_bounded_for_the_benchmark():
    spec = get_device("H200")
    for dtype in ("bf16", "tf32", "fp32"):
        assert 100 <= len(config_space(spec, dtype)) <= 200


def test_operand_alignment_follows_the_contiguous_dimension():
    from polyrec.perfmodel.gemm import operand_alignment

    assert operand_alignment(65536, 512, 13, "NT") == (False, False)  # both contiguous along K = 13
    assert operand_alignment(512, 13, 65536, "TN") == (True, False)  # A along M = 512, B along N = 13
    assert operand_alignment(1024, 1024, 1024, "NN") == (True, True)


def test_unaligned_loads_are_slower_and_cost_registers():
    spec = get_device("H200")
    ceil = ceilings(spec)
    config = GemmConfig(block_m=128, block_n=64, block_k=64, num_warps=8, num_stages=3)
    aligned = GemmProblem(m=1008, n=1008, k=1008, dtype="bf16")
    scalar = dataclasses.replace(aligned, a_aligned=False, b_aligned=False)
    assert estimate(scalar, config, spec, ceil).parts["gpu"] > 2 * estimate(aligned, config, spec, ceil).parts["gpu"]
    assert footprint(config, "bf16", spec, "none", (False, False)).registers > footprint(config, "bf16", spec).registers
    big = GemmConfig(block_m=64, block_n=256, block_k=64, num_warps=4, num_stages=3)
    assert footprint(big, "bf16", spec).fits and not footprint(big, "bf16", spec, "none", (False, False)).fits


def test_odd_sizes_select_differently_from_their_bucket():
    spec = get_device("H200")
    odd = select_gemm(1000, 999, 1001, "bf16", spec, epilogue="bias")
    even = select_gemm(1008, 1008, 1008, "bf16", spec, epilogue="bias")
    assert odd.triton_seconds > even.triton_seconds


@pytest.mark.parametrize("name", [n for n in ("MI300X", "MI350X") if n in DEVICES])
def test_amd_register_limit_shrinks_with_more_than_four_waves(name):
    spec = get_device(name)
    four = footprint(GemmConfig(block_m=128, block_n=128, block_k=32, num_warps=4, num_stages=2), "bf16", spec)
    eight = footprint(GemmConfig(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=2), "bf16", spec)
    assert eight.register_limit <= spec.max_registers_per_thread // 2 < four.register_limit


def test_library_time_is_one_fused_pass_over_the_epilogue_bytes():
    """A pass over the product and the epilogue's tensors, but for the bias (with or without ReLU) that
    the library applies in its own GEMM (cuBLASLt's epilogues): none there, nor a pass launch."""
    from polyrec.perfmodel.gemm import KERNEL_OVERHEAD_S
    from polyrec.perfmodel.gemm_library import fused_pass_seconds, library_call_seconds

    spec = get_device("H200")
    ceil = ceilings(spec)
    base = dict(m=4096, n=4096, k=512, dtype="bf16")
    times = {e: fused_pass_seconds(GemmProblem(**base, epilogue=e), ceil, 32)
             for e in ("none", "bias", "relu", "bias_relu", "residual", "cross", "cross_grad")}
    assert times["none"] == times["bias"] == times["bias_relu"] == 0 < times["relu"]
    assert times["relu"] < times["residual"] < times["cross"] < times["cross_grad"]
    calls = {e: library_call_seconds(GemmProblem(**base, epilogue=e), spec, ceil, 32) for e in ("none", "bias_relu")}
    assert calls["none"] == calls["bias_relu"]
    tensor = 4096 * 4096 * 2 / ceil.copy_bandwidth.value  # one bf16 [M, N] at the copy rate
    assert times["cross"] == pytest.approx(4 * tensor + KERNEL_OVERHEAD_S)  # product, x0, x read; C written


def test_a_residual_the_library_adds_in_place_costs_no_pass_but_its_read():
    """``library_adds_residual`` (``matmul``'s ``overwrite_residual``: ``residual.addmm_``): the library
    path is the GEMM plus one read of C at the copy rate, no pass and no pass launch; on the H200 that
    turns the DCN-v2 projection dgrad [65536, 3456] x 512 from the Triton kernel to the library (in the
    full-size step the library took 0.42 ms per call where the Triton kernel's 7 calls took 2.09 ms,
    benchmarks/results/gemm_backends_probe_2026-12-01). Other epilogues ignore the flag."""
    from polyrec.perfmodel.gemm_library import library_call_seconds, library_seconds

    spec = get_device("H200")
    ceil = ceilings(spec)
    p = GemmProblem(m=65536, n=3456, k=512, dtype="bf16", epilogue="residual")
    call, gpu = library_call_seconds(p, spec, ceil, 32, adds_residual=True)
    assert call == gpu == pytest.approx(library_seconds(p, spec, ceil) + 65536 * 3456 * 2 / ceil.copy_bandwidth.value)
    assert gpu < library_call_seconds(p, spec, ceil, 32)[1]
    gemm_select.clear_cache()
    in_place = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="residual", library_adds_residual=True)
    with_pass = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="residual")
    assert in_place.backend == "library" and in_place.gpu_seconds == pytest.approx(gpu)
    assert with_pass.library_seconds > in_place.library_seconds
    bias = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="bias", library_adds_residual=True)
    assert bias == select_gemm(65536, 3456, 512, "bf16", spec, epilogue="bias")


def test_epilogue_kinds_price_their_extra_tensors():
    from polyrec.kernels.gemm import epilogue_name

    assert epilogue_name(True, "none", False, residual=True) == "residual"
    assert epilogue_name(True, "none", False, cross_grad=True) == "cross_grad"
    assert epilogue_name(True, "none", True) == "cross"
    spec = get_device("H200")
    ceil = ceilings(spec)
    config = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4)
    seconds = {e: estimate(GemmProblem(m=65536, n=3456, k=512, dtype="bf16", epilogue=e), config, spec, ceil).seconds
               for e in ("none", "residual", "cross", "cross_grad")}
    assert seconds["none"] < seconds["residual"] < seconds["cross"] < seconds["cross_grad"]


def test_mlperf_cross_gemms_pick_the_faster_predicted_backend():
    spec = get_device("H200")
    for epilogue, k_major in (("cross", True), ("cross_grad", True), ("residual", False)):
        choice = select_gemm(65536, 3456, 512, "bf16", spec, epilogue=epilogue, b_k_major=k_major)
        assert choice.backend == ("library" if choice.library_seconds <= choice.triton_seconds else "triton")
        assert math.isfinite(choice.library_seconds) and math.isfinite(choice.triton_seconds)


def test_k_major_b_slows_only_wide_hopper_tiles():
    spec = get_device("H200")
    ceil = ceilings(spec)
    n_major = GemmProblem(m=65536, n=1024, k=3456, dtype="bf16", epilogue="bias_relu")
    k_major = dataclasses.replace(n_major, b_k_major=True)
    wide = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4)
    tall = GemmConfig(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=4)
    assert estimate(k_major, wide, spec, ceil).seconds > estimate(n_major, wide, spec, ceil).seconds
    assert estimate(k_major, tall, spec, ceil).seconds == estimate(n_major, tall, spec, ceil).seconds
    forward = select_gemm(65536, 1024, 3456, "bf16", spec, epilogue="bias_relu", b_k_major=True, tma=False).config
    assert forward.block_n < 256  # the classic forward (x @ Wᵀ) picks a tile the K-major B does not slow
    for name in [n for n in ("MI300X", "MI350X") if n in DEVICES]:  # no AMD measurement: layout-neutral
        amd, amd_ceil = get_device(name), ceilings(get_device(name))
        tile = GemmConfig(block_m=128, block_n=256, block_k=32, num_warps=8, num_stages=2, matrix_instr_nonkdim=16)
        assert estimate(k_major, tile, amd, amd_ceil).seconds == estimate(n_major, tile, amd, amd_ceil).seconds


def test_wgmma_loads_run_one_stage_less_ahead():
    from polyrec.perfmodel.gemm import MEMORY_LATENCY_S, WGMMA_HELD_BUFFERS

    spec = get_device("H200")
    ceil = ceilings(spec)
    problem = GemmProblem(m=8192, n=8192, k=8192, dtype="bf16")
    shallow = GemmConfig(block_m=128, block_n=256, block_k=32, num_warps=8, num_stages=3)
    deep = dataclasses.replace(shallow, num_stages=4)
    slow, fast = (estimate(problem, c, spec, ceil) for c in (shallow, deep))
    k_steps = 8192 // 32
    # 3 stages: one step of loads in flight behind the buffer wgmma holds, so a step takes a latency.
    assert WGMMA_HELD_BUFFERS == 1
    assert slow.seconds >= slow.parts["rounds"] * k_steps * MEMORY_LATENCY_S["nvidia"]
    assert fast.seconds < slow.seconds


def test_library_model_is_the_roofline_of_the_ceilings():
    from polyrec.perfmodel import gemm_library as model

    spec = get_device("H200")
    ceil = ceilings(spec)
    square = GemmProblem(m=8192, n=8192, k=8192, dtype="bf16")  # compute-bound
    expected = 2 * 8192**3 / ceil.matmul_flops["bf16"].value * model.LIBRARY_COMPUTE_FACTOR + model.LIBRARY_FIXED_S
    assert model.library_seconds(square, spec, ceil) == pytest.approx(expected)
    skinny = GemmProblem(m=65536, n=512, k=16, dtype="bf16")  # memory-bound
    moved = (65536 * 16 + 16 * 512 + 65536 * 512) * 2
    aligned = moved / ceil.copy_bandwidth.value * model.LIBRARY_MEMORY_FACTOR
    assert model.library_seconds(skinny, spec, ceil) == pytest.approx(aligned + model.LIBRARY_FIXED_S)
    unaligned = dataclasses.replace(skinny, k=13, a_aligned=False)
    moved13 = (65536 * 13 + 13 * 512 + 65536 * 512) * 2
    assert model.library_seconds(unaligned, spec, ceil) == pytest.approx(
        moved13 / ceil.copy_bandwidth.value * model.LIBRARY_MEMORY_FACTOR * model.LIBRARY_UNALIGNED_FACTOR
        + model.LIBRARY_FIXED_S)


def _kinds_ranked(problem: GemmProblem, spec, tma: bool) -> dict[str, float]:
    """The best predicted seconds of each kernel kind for a problem."""
    ranked = gemm_select.rank_configs(problem, spec, tma=tma)
    return {kind: min((t for t, c in ranked if c.persistent_tma == (kind == "tma")), default=math.inf)
            for kind in ("triton", "tma")}


def test_tma_configs_only_on_hopper_2_byte_spaces():
    h200 = get_device("H200")
    tma = [c for c in config_space(h200, "bf16") if c.persistent_tma]
    assert 8 <= len(tma) <= 20 and len({c.label for c in config_space(h200, "bf16")}) == len(config_space(h200, "bf16"))
    assert all(c.label.startswith("TMA ") and c.split_k == 1 for c in tma)
    assert not any(c.persistent_tma for c in config_space(h200, "fp32") + config_space(h200, "tf32"))
    for name in [n for n in ("MI300X", "MI350X", "A100", "B200") if n in catalog()]:
        assert not any(c.persistent_tma for c in config_space(get_device(name), "bf16")), name


def test_selector_never_picks_tma_where_it_cannot_run():
    spec = get_device("H200")
    gemm_select.clear_cache()
    cases = [dict(m=3456, n=512, k=65536, a_row_major=False),  # wgrad: Aᵀ
             dict(m=65536, n=3456, k=512, epilogue="residual"), dict(m=65536, n=3456, k=512, epilogue="cross_grad"),
             dict(m=65536, n=512, k=13, b_k_major=True),  # K = 13: A's rows are 26 bytes
             dict(m=65536, n=1020, k=1024), dict(m=65536, n=1024, k=1024, out_bytes=4),
             dict(m=65536, n=1024, k=1024, tma=False), dict(m=65536, n=1024, k=1024, a_aligned=False)]
    for case in cases:
        m, n, k = case.pop("m"), case.pop("n"), case.pop("k")
        assert not select_gemm(m, n, k, "bf16", spec, **case).config.persistent_tma, case
        assert not select_gemm(m, n, k, "tf32", spec).config.persistent_tma
    for name in [n for n in ("MI300X", "MI350X") if n in DEVICES]:
        for s in dlrm_suite():
            assert not select_gemm(s.m, s.n, s.k, "bf16", get_device(name), epilogue=s.epilogue,
                                   b_k_major=s.layout[1] == "T").config.persistent_tma


def test_selector_takes_the_faster_kind_and_keys_the_cache_on_it():
    spec = get_device("H200")
    gemm_select.clear_cache()
    problem = GemmProblem(m=65536, n=3456, k=512, dtype="bf16", epilogue="cross", b_k_major=True)
    best = _kinds_ranked(problem, spec, tma=True)
    assert math.isfinite(best["tma"]) and math.isfinite(best["triton"])
    choice = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="cross", b_k_major=True)
    assert choice.triton_seconds == min(best.values())
    assert choice.config.persistent_tma == (best["tma"] < best["triton"])
    assert choice.kernel in ("library", "tma" if choice.config.persistent_tma else "triton")
    classic = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="cross", b_k_major=True, tma=False)
    assert not classic.config.persistent_tma and classic.triton_seconds == best["triton"]
    wgrad = select_gemm(65536, 3456, 512, "bf16", spec, epilogue="cross", b_k_major=True, a_row_major=False)
    assert wgrad == classic  # another cache entry, the same answer as without TMA


def test_tma_model_prices_host_rounds_and_epilogue():
    from polyrec.perfmodel import gemm_tma as model

    spec = get_device("H200")
    ceil = ceilings(spec)
    tile = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, epilogue_subtile=True,
                      persistent_tma=True)
    small = estimate(GemmProblem(m=2048, n=3456, k=512, dtype="bf16", epilogue="cross", b_k_major=True), tile, spec, ceil)
    assert small.seconds == model.TMA_HOST_S > small.parts["gpu"]  # descriptors on the host bound small calls
    big = GemmProblem(m=65536, n=3456, k=512, dtype="bf16", b_k_major=True)
    plain, cross = (estimate(dataclasses.replace(big, epilogue=e), tile, spec, ceil) for e in ("none", "cross"))
    assert plain.parts["rounds"] == math.ceil(512 * 14 / spec.compute_units)
    assert cross.seconds > plain.seconds + plain.parts["rounds"] * cross.parts["epilogue_loads"] * 0.99
    full = dataclasses.replace(tile, epilogue_subtile=False)
    assert not footprint(full, "bf16", spec, "cross").fits and footprint(full, "bf16", spec, "none").fits
    assert not footprint(tile, "bf16", spec, "residual").fits
    assert estimate(GemmProblem(m=4096, n=4096, k=4096, dtype="bf16"), tile, get_device("A100"), ceil).seconds == math.inf


def test_a_captured_call_picks_the_backend_by_gpu_time():
    """Under CUDA-graph capture (``graphed``) the host launch floor is gone: the backend with the lower
    predicted GPU time runs, the same Triton config stays the candidate, and the two are cached apart."""
    from polyrec.perfmodel.gemm_library import library_call_seconds

    spec = get_device("H200")
    ceil = ceilings(spec)
    flipped = 0
    for s in dlrm_suite():
        kw = dict(epilogue=s.epilogue, b_k_major=s.layout[1] == "T", a_row_major=s.layout[0] == "N")
        eager = select_gemm(s.m, s.n, s.k, "bf16", spec, **kw)
        graphed = select_gemm(s.m, s.n, s.k, "bf16", spec, graphed=True, **kw)
        assert graphed.config == eager.config
        problem = GemmProblem(m=gemm_select.bucket(s.m), n=gemm_select.bucket(s.n), k=gemm_select.bucket(s.k),
                              dtype="bf16", epilogue=s.epilogue, b_k_major=s.layout[1] == "T",
                              a_aligned=all(x % 16 == 0 for x in (s.m, s.n, s.k)),
                              b_aligned=all(x % 16 == 0 for x in (s.m, s.n, s.k)))
        library_gpu = library_call_seconds(problem, spec, ceil, pass_partial_rows(problem.m))[1]
        triton_gpu = estimate(problem, graphed.config, spec, ceil).parts["gpu"]
        assert graphed.backend == ("library" if library_gpu <= triton_gpu else "triton"), s.name
        flipped += graphed.backend != eager.backend
    assert flipped > 0  # small shapes: the host floor had sent them to the library


def test_crossgrad_pass_walks_fewer_row_blocks_at_small_batches():
    """Eight 32-row blocks per program at MLPerf's batch; halved while under 256 row programs would remain."""
    assert [pass_row_blocks(m) for m in (65536, 65535, 32768, 16384, 8192, 4096, 1, 0)] == [8, 8, 4, 2, 1, 1, 1, 1]
