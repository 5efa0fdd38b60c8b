"""The persistent TMA GEMM prototype (polyrec.kernels.gemm_tma): numerics through the Triton
interpreter (which runs host tensor descriptors) against float64 for every epilogue and both B layouts,
odd M and partial N / K tiles, several tiles per persistent program, poisoned outputs; input checks;
and compile-fit for sm_90 (marked ``compile``)."""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from polyrec.kernels.gemm import reference_matmul
from polyrec.kernels.gemm_tma import TmaGemmConfig, check_device, gemm_tma

INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs kernels through TRITON_INTERPRET=1")

#: Small tiles so that M=77, N=72, K=40 has partial tiles on every edge (TMA pads loads with zeros
#: and clips stores) and 3 programs walk 6 tiles each.
SMALL = TmaGemmConfig(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=2)
M, N, K = 77, 72, 40  # N and K multiples of 8: TMA's 16-byte row strides for 2-byte elements
#: bf16 output: one unit in the last place is at most 2^-7 of the value (8 significant bits).
BF16_REL = 2.0**-7


def _inputs(epilogue: str, b_k_major: bool, gen: torch.Generator, dtype=torch.bfloat16):
    a = torch.randn((M, K), generator=gen).to(dtype)  # [M, K]
    b = torch.randn((N, K) if b_k_major else (K, N), generator=gen).to(dtype)
    args: dict = {}
    if epilogue != "none":
        args["bias"] = torch.randn(N, generator=gen).to(dtype)  # [N]
    if epilogue == "bias_relu":
        args["activation"] = "relu"
    if epilogue == "cross":
        args["cross"] = (torch.randn((M, N), generator=gen).to(dtype), torch.randn((M, N), generator=gen).to(dtype))
    return a, b, args


def _assert_close(out: torch.Tensor, ref: torch.Tensor, rel: float) -> None:
    got = out.double()
    assert torch.isfinite(got).all(), "output has NaN/inf (an unwritten tile keeps the poison)"
    tol = rel * ref.abs() + 1e-3 * ref.abs().max()
    worst = ((got - ref).abs() - tol).max().item()
    assert worst <= 0, f"error exceeds tolerance by {worst:.3g} (max |ref| {ref.abs().max():.3g})"


@needs_interpreter
@pytest.mark.parametrize("b_k_major", [True, False], ids=["B_NK", "B_KN"])
@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "cross"])
@pytest.mark.parametrize("subtile", [False, True], ids=["full", "subtile"])
def test_matches_float64(epilogue, b_k_major, subtile):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{epilogue} {b_k_major} {subtile}".encode()))
    a, b, args = _inputs(epilogue, b_k_major, gen)
    config = TmaGemmConfig(block_m=32, block_n=32, block_k=16, group_m=2, epilogue_subtile=subtile)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    gemm_tma(a, b, b_k_major=b_k_major, config=config, out=out, num_programs=3, **args)
    _assert_close(out, reference_matmul(a, b, trans_b=b_k_major, **args), BF16_REL)


@needs_interpreter
def test_fp16_cross_one_program_all_tiles():
    """fp16 inputs, and a single program looping over every tile (the persistent loop's bounds)."""
    gen = torch.Generator().manual_seed(7)
    a, b, args = _inputs("cross", True, gen, torch.float16)
    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    gemm_tma(a, b, b_k_major=True, config=SMALL, out=out, num_programs=1, **args)
    _assert_close(out, reference_matmul(a, b, trans_b=True, **args), 2.0**-10)


def test_rejects_unaligned_rows():
    a = torch.randn(16, 36).bfloat16()  # rows of 72 bytes: not a multiple of 16
    b = torch.randn(32, 36).bfloat16()
    with pytest.raises((ValueError, RuntimeError), match="16|sm_90"):
        gemm_tma(a, b, b_k_major=True, config=SMALL)


def test_rejects_bad_shapes_and_epilogues():
    if not INTERPRETING:
        pytest.skip("the device check runs first off the interpreter")
    a = torch.randn(16, 32).bfloat16()
    with pytest.raises(ValueError, match=r"b \[K, N\]"):
        gemm_tma(a, torch.randn(48, 16).bfloat16(), b_k_major=False, config=SMALL)
    with pytest.raises(ValueError, match="bias"):
        gemm_tma(a, torch.randn(16, 32).bfloat16(), b_k_major=True, config=SMALL, bias=torch.randn(8).bfloat16())
    x = torch.randn(16, 16).bfloat16()
    with pytest.raises(ValueError, match="cross and relu"):
        gemm_tma(a, torch.randn(16, 32).bfloat16(), b_k_major=True, config=SMALL, activation="relu", cross=(x, x))


def test_refuses_non_hopper(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="sm_90"):
        check_device(torch.zeros(1))


@pytest.mark.compile
@pytest.mark.skipif(INTERPRETING, reason="compile-only checks need TRITON_INTERPRET unset")
@pytest.mark.parametrize("config, epilogue, b_k_major", [
    (TmaGemmConfig(), "cross", True),
    (TmaGemmConfig(block_n=256, epilogue_subtile=True, l2_prefetch=True), "cross", True),
    (TmaGemmConfig(num_stages=2, epilogue_subtile=True, ctas_per_sm=2), "cross", True),
    (TmaGemmConfig(block_n=256, num_stages=4, epilogue_subtile=True), "bias_relu", True),
    (TmaGemmConfig(warp_specialize=True), "none", False),
], ids=lambda v: v.label if isinstance(v, TmaGemmConfig) else str(v))
def test_compiles_and_fits_sm90(config, epilogue, b_k_major):
    from polyrec.hardware.catalog import get_device
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_tma import compile_job

    spec = get_device("H200")
    report = compile_for(compile_job(config, epilogue=epilogue, b_k_major=b_k_major), spec)
    assert report.fits, report.problems
    if config.ctas_per_sm == 2:  # two programs per SM must fit the SM's shared memory together
        assert 2 * report.shared_bytes <= spec.smem_per_cu, report.shared_bytes


@pytest.mark.compile
@pytest.mark.skipif(INTERPRETING, reason="compile-only checks need TRITON_INTERPRET unset")
def test_l2_prefetch_reaches_the_ptx():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from polyrec.kernels.gemm_tma import compile_job

    job = compile_job(TmaGemmConfig(l2_prefetch=True), epilogue="cross")
    src = ASTSource(job.kernel, signature=job.signature, constexprs=job.constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": job.num_warps, "num_stages": job.num_stages})
    assert "prefetch.global.L2" in compiled.asm["ptx"]


#: The selector's form of a small TMA config (``GemmConfig.persistent_tma``), for ``matmul``.
def _selector_config(subtile: bool):
    from polyrec.kernels.gemm_configs import GemmConfig

    return GemmConfig(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=2,
                      epilogue_subtile=subtile, persistent_tma=True)


@needs_interpreter
@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("epilogue", ["none", "bias", "bias_relu", "cross"])
def test_matmul_runs_tma_configs(epilogue, layout, monkeypatch):
    """``matmul(config=<TMA config>)`` routes to gemm_tma: float64 reference, odd M, both B layouts,
    an fp32 bias (added in fp32 by the kernel), the output matmul allocates poisoned with NaN."""
    from polyrec.kernels.gemm import matmul

    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *shape, **kw: empty(*shape, **kw).fill_(float("nan")))

    gen = torch.Generator().manual_seed(zlib.crc32(f"matmul {epilogue} {layout}".encode()))
    a, b, args = _inputs("bias_relu" if epilogue == "bias" else epilogue, layout == "NT", gen)
    if epilogue == "bias":
        args.pop("activation")
    if "bias" in args and layout == "NN":
        args["bias"] = args["bias"].float()
    out = matmul(a, b, trans_b=layout == "NT", config=_selector_config(subtile=layout == "NN"), **args)
    _assert_close(out, reference_matmul(a, b, trans_b=layout == "NT", **args), BF16_REL)


def test_matmul_refuses_tma_configs_it_cannot_run():
    from polyrec.kernels.gemm import matmul
    from polyrec.kernels.gemm_launch import tma_operands

    a = torch.randn(16, 32).bfloat16()
    with pytest.raises(ValueError, match="residual"):
        matmul(a, torch.randn(32, 16).bfloat16(), residual=torch.zeros(16, 16).bfloat16(),
               config=_selector_config(False))
    g = torch.randn(48, 16).bfloat16()
    assert not tma_operands(g.t(), g, torch.bfloat16, None, None, None)  # wgrad: Aᵀ
    assert not tma_operands(a, a.t(), torch.float32, None, None, None)  # fp32 output
    odd = torch.randn(16, 36).bfloat16()  # rows of 72 bytes
    assert not tma_operands(odd, torch.randn(36, 16).bfloat16(), torch.bfloat16, None, None, None)
    x = torch.randn(16, 16).bfloat16()
    assert tma_operands(a, torch.randn(16, 32).bfloat16().t(), torch.bfloat16, (x, x), None, None)
    assert not tma_operands(a, torch.randn(32, 16).bfloat16(), torch.bfloat16, (x.float(), x), None, None)
