"""NaN reaches the loss through the fused kernels as through torch: the ReLU epilogues and the fp8
casts' clamp are lowered to NaN-propagating ops. The interpreter keeps NaN either way (numpy's maximum
and clip), so these read the compiled kernels' Triton IR for sm_90."""

from __future__ import annotations

import re

import pytest

from compile_util import compile_only
from polyrec.hardware.catalog import get_device
from polyrec.hardware.compile import compile_job

#: Triton IR ops that drop a NaN operand: maxnumf/minnumf (``tl.maximum``/``tl.minimum``'s default),
#: a clamp without ``propagateNan = all``.
DROPPING = re.compile(r"arith\.(maxnumf|minnumf)|tt\.clampf(?![^\n]*propagateNan = all)")


def _ttir(job) -> str:
    return compile_job(job, get_device("H200")).asm["ttir"]


def _fp8_cast_relu_job():
    from polyrec.kernels import fp8

    return next(j for j in fp8.compile_jobs(get_device("H200")) if j.label.endswith("plain+transposed relu"))


def _gemm_relu_job(persistent_tma: bool):
    from polyrec.kernels.gemm_configs import GemmConfig
    from polyrec.kernels.gemm_kernels import compile_job_for

    config = GemmConfig(block_m=128, block_n=128, block_k=64, group_m=8, split_k=1, num_warps=8, num_stages=3,
                        persistent_tma=persistent_tma)
    return compile_job_for(config, "bf16", get_device("H200"), epilogue="bias_relu")


@compile_only
@pytest.mark.parametrize("kernel", ["gemm", "gemm_tma"])
def test_the_gemm_relu_epilogue_keeps_nan(kernel):
    ttir = _ttir(_gemm_relu_job(persistent_tma=kernel == "gemm_tma"))
    assert "arith.maximumf" in ttir, "the ReLU epilogue is not a NaN-propagating maximum"
    assert not DROPPING.search(ttir), f"a NaN-dropping op: {DROPPING.search(ttir).group(0)}"


@compile_only
def test_the_fp8_cast_keeps_nan_in_its_relu_and_its_clamp():
    ttir = _ttir(_fp8_cast_relu_job())
    assert "arith.maximumf" in ttir, "the cast's ReLU is not a NaN-propagating maximum"
    clamps = re.findall(r"tt\.clampf[^\n]*", ttir)
    assert clamps and all("propagateNan = all" in c for c in clamps), f"clamps: {clamps}"
