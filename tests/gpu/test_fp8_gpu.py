"""On the GPU machine: the fp8 dense layers (polyrec.kernels.fp8, fp8_dense) with the compiled kernels and
cuBLASLt's fp8 GEMMs: casts equal torch's conversion, the MLP equals a float64 fake-quant reference, the
passes that write their own fp8 copies (the cross passes, the MLPs' ReLU / bias backward) give the
standalone casts' results bit for bit (the bias gradients, fp32 column sums of a kernel compiled with the
copies' code beside them, within 1e-5), and a run learns."""

from __future__ import annotations

import contextlib
import copy
from unittest import mock

import pytest
import torch

from polyrec.kernels import dcn, fp8, fp8_dense
from polyrec.runtime import TrainConfig, Trainer

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", [fp8.FORWARD, fp8.GRADIENT])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cast_equals_torchs_conversion(kind, relu, dtype):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(1037, 2100, device="cuda", generator=gen) * torch.logspace(-7, 7, 2100, device="cuda")
    x = x.to(dtype)[:, 3:2083]  # strided, [1037, 2080]
    scaling = fp8.Fp8Scaling([kind]).cuda()
    scaling.begin(True)
    scaling.prepare(0, x, relu)
    scaling.scales.mul_(8)  # values past the recorded maximum saturate
    q, qt = fp8.cast_fp8(x, scaling, 0, transposed=True, relu=relu)
    only_t = fp8.cast_fp8(x, scaling, 0, plain=False, transposed=True, relu=relu)[1]
    fmt = scaling.format(0)
    act = x.float().clamp_min(0) if relu else x.float()
    ref = (act * scaling.scales[0]).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)
    assert torch.equal(q.view(torch.uint8), ref.view(torch.uint8))
    assert torch.equal(qt.view(torch.uint8), ref.t().contiguous().view(torch.uint8))
    assert torch.equal(only_t.view(torch.uint8), ref.t().contiguous().view(torch.uint8))
    assert scaling.history[0, 0] == act.abs().max()


def _fake_quant(t: torch.Tensor, scaling: fp8.Fp8Scaling, role: int) -> torch.Tensor:
    fmt = scaling.format(role)
    q = (t.double() * scaling.scales[role].double()).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)
    return q.double() * scaling.inverse[role, 0].double()


def test_mlp_equals_the_fake_quant_reference():
    gen = torch.Generator(device="cuda").manual_seed(2)
    dims = (256, 512, 128)
    ws = [(torch.randn(o, i, device="cuda", generator=gen) * 0.05).requires_grad_() for i, o in zip(dims, dims[1:])]
    bs = [torch.randn(o, device="cuda", generator=gen).requires_grad_() for o in dims[1:]]
    x = torch.randn(1024, dims[0], device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(2)).cuda()
    y = fp8_dense.mlp(x, ws, bs, (True, False), scaling)
    gy = torch.randn(y.shape, device="cuda", generator=gen, dtype=torch.bfloat16)
    y.backward(gy)
    b16 = [b.detach().bfloat16().double() for b in bs]
    x0q, w0q = _fake_quant(x, scaling, 0), _fake_quant(ws[0], scaling, 1)
    h = (x0q @ w0q.t() + b16[0]).bfloat16()
    x1q, w1q = _fake_quant(h.clamp_min(0), scaling, 3), _fake_quant(ws[1], scaling, 4)
    out = (x1q @ w1q.t() + b16[1]).bfloat16()
    # the same quantized operands; the GEMMs' fp32 (fast) accumulation and a bf16 output round apart from
    # float64, which moves a few quantized values of the next layer by one step: compared by relative norm
    g1q = _fake_quant(gy, scaling, 5)
    g0 = (g1q @ w1q).bfloat16().double() * (h > 0)
    g0q = _fake_quant(g0, scaling, 2)
    for got, want in ((y, out), (ws[1].grad, g1q.t() @ x1q), (bs[0].grad, g0.sum(0)), (ws[0].grad, g0q.t() @ x0q),
                      (x.grad, g0q @ w0q)):
        assert ((got.double() - want.double()).norm() / want.double().norm()).item() < 1e-2


def test_fused_copies_equal_the_standalone_casts():
    gen = torch.Generator(device="cuda").manual_seed(3)
    b, d, r, layers = 2048, 3456, 512, 3
    vs = [(torch.randn(r, d, device="cuda", generator=gen) * 0.02).requires_grad_() for _ in range(layers)]
    us = [(torch.randn(d, r, device="cuda", generator=gen) * 0.02).requires_grad_() for _ in range(layers)]
    bs = [(torch.randn(d, device="cuda", generator=gen) * 0.1).requires_grad_() for _ in range(layers)]
    x0 = torch.randn(b, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    scaling = fp8.Fp8Scaling(fp8_dense.cross_kinds(layers)).cuda()

    def step(state):
        x = x0.clone().requires_grad_()
        y = dcn.cross_network(x, vs, us, bs, fp8=state)
        y.backward(torch.full_like(y, 1e-3))
        grads = [x.grad] + [p.grad.clone() for p in (*vs, *us, *bs)]
        for p in (*vs, *us, *bs):
            p.grad = None
        return [y.detach(), *grads]

    step(scaling)  # every role gets a history: the next step's passes write the copies
    standalone_state = copy.deepcopy(scaling)
    fused = step(scaling)
    with mock.patch.object(fp8_dense, "fused_out", lambda *args, **kwargs: None):
        standalone = step(standalone_state)
    bias_grads = len(fused) - layers
    for a, c in zip(fused[:bias_grads], standalone[:bias_grads]):
        assert torch.equal(a, c)
    for a, c in zip(fused[bias_grads:], standalone[bias_grads:]):  # the pass's fp32 column sums, compiled apart
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-7)
    assert torch.equal(scaling.history, standalone_state.history)


def test_mlp_fused_copies_equal_the_standalone_casts():
    """The top MLP's fp8 layers (MLPerf's widths, a smaller batch): once the output gradients' roles have a
    history, the ReLU / bias backward writes their copies; the step equals casting them apart (the bias
    gradients' column sums within 1e-5: the kernel compiles apart with the copies' code)."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    dims, relus = (3456, 1024, 1024, 512, 256), (True, True, True, True)
    ws = [(torch.randn(o, i, device="cuda", generator=gen) * (2 / (i + o)) ** 0.5).requires_grad_()
          for i, o in zip(dims, dims[1:])]
    bs = [(torch.randn(o, device="cuda", generator=gen) * 0.1).requires_grad_() for o in dims[1:]]
    x0 = torch.randn(2048, dims[0], device="cuda", generator=gen, dtype=torch.bfloat16)
    gy = torch.randn(2048, dims[-1], device="cuda", generator=gen, dtype=torch.bfloat16) * 1e-3
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(len(ws))).cuda()

    def step(state):
        x = x0.clone().requires_grad_()
        fp8_dense.mlp(x, ws, bs, relus, state).backward(gy)
        grads = [x.grad] + [p.grad.clone() for p in (*ws, *bs)]
        for p in (*ws, *bs):
            p.grad = None
        return grads

    step(scaling)
    standalone_state = copy.deepcopy(scaling)
    fused = step(scaling)
    with mock.patch.object(fp8_dense, "fused_out", lambda *args, **kwargs: None):
        standalone = step(standalone_state)
    for a, c in zip(fused[:1 + len(ws)], standalone[:1 + len(ws)]):
        assert torch.equal(a, c)
    for a, c in zip(fused[1 + len(ws):], standalone[1 + len(ws):]):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-7)
    assert torch.equal(scaling.history, standalone_state.history)


def test_fp8_training_learns_on_the_demo_task():
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic", steps=300, batch_size=512, log_every=300,
                      device="cuda", precision="fp8", cuda_graphs=False)
    result = Trainer(cfg, progress=False).train()
    assert result.status == "done"
    assert result.final_auc is not None and result.final_auc > 0.7


def _dcnv2_small_fp8(cuda_graphs, first_step=contextlib.nullcontext) -> tuple[Trainer, list[float]]:
    """A dcnv2-small fp8 run's trainer and the losses of its first 8 steps (the first inside ``first_step()``)."""
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", precision="fp8",
                      log_every=10**9, cuda_graphs=cuda_graphs)
    trainer = Trainer(cfg, progress=False)
    with first_step():
        losses = [float(trainer.train_step())]
    return trainer, losses + [float(trainer.train_step()) for _ in range(7)]


def test_fp8_graphed_by_auto_trains_like_fp8_eager():
    """At a host-bound batch "auto" graphs an fp8 run (by its bf16 step's prediction), and the graphed fp8
    step trains as the eager one does: the same losses within fp8 noise over the first steps."""
    graphed, with_graphs = _dcnv2_small_fp8("auto")
    eager, without = _dcnv2_small_fp8(False)
    assert graphed.graphs.on and not eager.graphs.on
    assert with_graphs == pytest.approx(without, rel=0.02)


def test_graph_warm_up_gives_fp8_scaling_true_gradients():
    """The capture's warm-up runs the backward with the loss's true gradient, not uninitialized memory
    (``polyrec.runtime.graphs.capture``): with every floating ``torch.empty_like`` of the first step
    outside the capture filled with a quarter of its dtype's maximum (make_graphed_callables's own
    warm-up takes its loss gradient from one), no fp8 history records such a maximum and the graphed run
    trains as the eager one does."""
    real = torch.empty_like

    def poisoned(t, *args, **kwargs):
        out = real(t, *args, **kwargs)
        capturing = torch.cuda.is_current_stream_capturing()
        if out.is_cuda and out.dtype in (torch.float32, torch.bfloat16) and not capturing:
            out.fill_(torch.finfo(out.dtype).max / 4)
        return out

    graphed, with_graphs = _dcnv2_small_fp8(True, lambda: mock.patch.object(torch, "empty_like", poisoned))
    histories = [m.history for m in graphed.model.modules() if isinstance(m, fp8.Fp8Scaling)]
    assert histories and all(bool(h.isfinite().all()) and h.max().item() < 1e3 for h in histories)
    assert with_graphs == pytest.approx(_dcnv2_small_fp8(False)[1], rel=0.02)
