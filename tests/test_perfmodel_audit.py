"""Perf model at the edges of its inputs: calibrated rates near the float limits, and the step's overlaps where
the collectives outlast the dense work they hide under."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.hardware.types import Ceiling
from polyrec.kernels.gemm_configs import config_space
from polyrec.perfmodel.gemm import GemmProblem, estimate
from polyrec.perfmodel.step import DDP_BUCKET_BYTES, NCCL_CONTENTION, Contention, StepParts, step_time


@pytest.mark.parametrize("tma", [False, True])
def test_a_matmul_rate_near_the_float_limit_prices_every_config(tma):
    """A matmul ceiling of 1e300 FLOP/s (a calibration file held one; ``ceilings`` now refuses it) made the sustained
    clock ``boost x rate`` overflow to inf and the operand port's cycles divide by 0: ZeroDivisionError in the
    planner. Every fitting config, classic or TMA, is priced finite, and no slower than at the datasheet's rate."""
    spec = get_device("H200")
    datasheet = ceilings(spec, {})
    fast = dataclasses.replace(datasheet, matmul_flops={**datasheet.matmul_flops, "bf16": Ceiling(value=1e300,
                                                                                                  origin="test")})
    problem = GemmProblem(m=65536, n=3456, k=512, dtype="bf16")
    configs = [c for c in config_space(spec, "bf16") if c.persistent_tma == tma]
    assert configs
    for cfg in configs:
        est = estimate(problem, cfg, spec, fast)
        if est.footprint.fits:
            assert 0.0 < est.seconds < math.inf
            assert est.parts["gpu"] <= estimate(problem, cfg, spec, datasheet).parts["gpu"]


def _ddp(dense_bwd_s: float, contention: Contention = Contention(), overlap: str = "ddp") -> float:
    """One rank whose all-reduce (100 buckets) and input exchange each outlast its dense work."""
    return step_time(StepParts(embedding_fwd_s=[1.0], embedding_bwd_s=[1.0], dense_fwd_s=[0.5],
                               dense_bwd_s=[dense_bwd_s], dense_optimizer_s=[0.1], other_s=[0.0],
                               input_all_to_all_s=5.0, all_reduce_s=5.0, all_reduce_bytes=100 * DDP_BUCKET_BYTES,
                               overlap=overlap, contention=contention)).total_s


def test_the_input_exchange_hides_only_under_what_the_all_reduce_left():
    """The all-reduce hides under the dense backward, and ``ddp`` let the input exchange hide under the whole dense
    work again: each second more of backward hid two seconds of collectives, so a longer backward made a shorter
    step (11.1 -> 10.1 -> 9.1 s). Now, as under ``pipeline``, the input exchange takes the 0.5 s of dense work the
    all-reduce left: 2 + 0.5 + b + 5 + 5 + 0.1 - b (all-reduce) - 0.5 (input) = 12.1 s whatever b."""
    for dense_bwd_s in (1.0, 2.0, 3.0):
        assert _ddp(dense_bwd_s) == pytest.approx(12.1)


@pytest.mark.parametrize("overlap", ["ddp", "pipeline"])
@pytest.mark.parametrize("contention", [Contention(), NCCL_CONTENTION])
def test_a_longer_dense_backward_never_shortens_the_step(rng, overlap, contention):
    for _ in range(200):
        shape = [float(x) * 4 for x in torch.rand(9, generator=rng)]
        parts = dict(embedding_fwd_s=[shape[0]], embedding_bwd_s=[shape[1]], dense_fwd_s=[shape[2]],
                     dense_optimizer_s=[shape[3]], other_s=[0.0], input_all_to_all_s=shape[4],
                     output_all_to_all_s=shape[5], grad_all_to_all_s=shape[6], all_reduce_s=shape[7],
                     all_reduce_bytes=8 * DDP_BUCKET_BYTES, overlap=overlap, contention=contention)
        totals = [step_time(StepParts(dense_bwd_s=[shape[8] + extra], **parts)).total_s for extra in (0.0, 0.5, 1.0)]
        assert totals[0] <= totals[1] + 1e-12 and totals[1] <= totals[2] + 1e-12
