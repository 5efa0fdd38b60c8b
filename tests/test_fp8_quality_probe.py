"""benchmarks/fp8_quality_probe.py: the fp8 rounding of GEMM operands and gradients it trains with."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmark_util import load_benchmark

probe = load_benchmark("fp8_quality_probe")


def test_round_fp8_scales_amax_to_the_format_max_and_rounds_to_its_grid():
    x = torch.tensor([0.0, 1.0, -3.0, 0.3, 7.0])
    got = probe.round_fp8(x, torch.float8_e4m3fn, probe.E4M3_MAX)
    scale = probe.E4M3_MAX / 7.0
    assert torch.equal(got, (x * scale).to(torch.float8_e4m3fn).float() / scale)
    assert got[4] == 7.0 and got[1] == 1.0  # the amax maps onto 448, 1.0 onto 64: both on e4m3's grid
    assert got[3] == 0.3125  # 0.3 * 64 = 19.2: e4m3 steps by 2 between 16 and 32, to 20
    assert torch.equal(probe.round_fp8(torch.zeros(3), torch.float8_e5m2, probe.E5M2_MAX), torch.zeros(3))


def test_fp8_matmul_rounds_forward_operands_and_the_output_gradient():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=gen, requires_grad=True)
    w = torch.randn(16, 32, generator=gen, requires_grad=True)
    g = torch.randn(8, 16, generator=gen)
    y = probe.fp8_matmul(x, w)
    q = probe.round_fp8
    qx, qw = q(x.detach(), torch.float8_e4m3fn, probe.E4M3_MAX), q(w.detach(), torch.float8_e4m3fn, probe.E4M3_MAX)
    torch.testing.assert_close(y, qx @ qw.T)
    assert not torch.allclose(y, x @ w.T, rtol=1e-3, atol=1e-3)  # the rounding is really applied
    y.backward(g)
    qg = q(g, torch.float8_e5m2, probe.E5M2_MAX)
    torch.testing.assert_close(x.grad, qg @ qw)  # dgrad reads the e5m2 gradient and the e4m3 weight
    torch.testing.assert_close(w.grad, qg.T @ qx)  # wgrad the e5m2 gradient and the e4m3 input


def test_ops_keep_the_last_layer_unrounded_and_round_the_cross_product():
    ops = probe.Fp8Ops()
    gen = torch.Generator().manual_seed(1)
    x, w1, b1 = torch.randn(4, 32, generator=gen), torch.randn(1, 32, generator=gen), torch.randn(1, generator=gen)
    torch.testing.assert_close(ops.linear(x, w1, b1, relu=False), F.linear(x, w1, b1))
    x0, v, w, b = (torch.randn(4, 32, generator=gen), torch.randn(4, 16, generator=gen),
                   torch.randn(32, 16, generator=gen), torch.randn(32, generator=gen))
    torch.testing.assert_close(ops.cross(x0, v, x, w, b), x0 * (probe.fp8_matmul(v, w) + b) + x)


def test_summary_means_and_gap():
    rows = [{"seed": s, "gemms": g, "test_auc": a} for s, g, a in
            ((0, "fp32", 0.78), (0, "fp8", 0.77), (1, "fp32", 0.76), (1, "fp8", 0.76))]
    got = probe.summarize(rows)
    assert got["fp32_auc"] == pytest.approx(0.77) and got["fp8_auc"] == pytest.approx(0.765)
    assert got["gap"] == pytest.approx(-0.005) and got["seeds"] == 2


def test_tasks_are_e2es_movielens_run_and_make_demos_run():
    assert probe.task("movielens:x.inter") == {"steps": 400, "batch_size": 1024, "lr": 0.01,
                                               "embedding_optimizer": "adagrad", "dense_optimizer": "adagrad"}
    assert probe.task("synthetic") == {"steps": 600, "batch_size": 512}
    with pytest.raises(ValueError, match="criteo:x"):
        probe.task("criteo:x")
