"""A/B (one H200 run, 2026-12-01): the cross network's top-layer residual GEMM adding into the incoming
gradient in place (``owns_output_grad``, which DLRM sets: the library's in-place add, as the layers
below already do) against leaving that gradient as given (the classic Triton GEMM with a residual
epilogue, 0.62 ms in ``e2e_profile_nvidia-h200_2026-12-01``). First the network's gradients both ways
on random inputs (largest difference relative to the largest value); then full-size ``mlperf-dcnv2``,
batch 65536, interleaved rounds of 40 steps, and each way's kernels by the profiler (device ms per step:
the wall clock of one machine drifts by more than the change). Writes ``$OUT/probe_cross_grad_owned.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/cross_grad_owned_ab.py
"""
import functools
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.kernels.dcn import cross_network
from polyrec.models.layers import LowRankCross

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import interleaved_rounds, kernel_table, mlperf_trainer, warm_each  # noqa: E402


def grads(owned: bool) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(1)
    b, d, r = 8192, 3456, 512
    x0 = torch.randn(b, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
    ws = [(torch.randn(s, device="cuda", generator=gen) * 0.02).to(torch.bfloat16).requires_grad_()
          for _ in range(3) for s in ((r, d), (d, r), (d,))]
    out = cross_network(x0, ws[0::3], ws[1::3], ws[2::3], owns_output_grad=owned)
    out.backward(torch.randn(b, d, device="cuda", generator=gen, dtype=torch.bfloat16))
    return [x0.grad, *(w.grad for w in ws)]


res: dict = {"rounds": []}
res["max_rel_diff"] = max(((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                          for a, b in zip(grads(True), grads(False)))
print(res, flush=True)
state = {"owned": True}
forward = LowRankCross.forward


def patched(self, x0, ops, on_input_grad=None, owns_output_grad=False):
    return forward(self, x0, ops, on_input_grad, owns_output_grad=state["owned"])


LowRankCross.forward = patched
tr = mlperf_trainer()
policies = {owned: functools.partial(state.__setitem__, "owned", owned) for owned in (False, True)}
warm_each(tr, policies, 3)
res["rounds"] = interleaved_rounds(tr, policies, 6, key="owned", steps=40)
for owned in (False, True):
    state["owned"] = owned
    kernels = kernel_table(tr.train_step, reps=5)
    res[f"kernels_owned_{owned}"] = kernels
    gemms = [k for k in kernels if "gemm_kernel" == k["kernel"] or "badd" in k["kernel"]]
    print(owned, f"kernel ms per step {sum(k['ms_per_step'] for k in kernels):.3f}",
          [(k["kernel"][-40:], k["calls_per_step"], round(k["ms_per_step"], 3)) for k in gemms], flush=True)
loss = tr.train_step()
tr.sync()
res["finite_loss"] = bool(torch.isfinite(loss).item())
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_cross_grad_owned.json"), "w"), indent=1)
