"""A/B (one H200 run, 2026-12-01): ``FusedAdagrad`` (polyrec.kernels.dense_optim, one Triton launch per
step) against ``torch.optim.Adagrad`` (foreach: four multi-tensor kernels) for the dense parameters of
the full-size ``mlperf-dcnv2`` step, batch 65536, interleaved rounds of 20 steps; first the two
optimizers on the GPU over three steps (largest difference). Writes ``$OUT/probe_fused_adagrad.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/fused_adagrad_ab.py
"""
import functools
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.kernels.dense_optim import FusedAdagrad
res = {"rounds": []}
gen = torch.Generator(device="cuda").manual_seed(0)
ps = [torch.randn(s, device="cuda", generator=gen) for s in ((1024, 3456), (3456,), (512, 13), (1,))]
a = [p.clone().requires_grad_() for p in ps]
b = [p.clone().requires_grad_() for p in ps]
oa, ob = torch.optim.Adagrad(a, lr=0.01), FusedAdagrad(b, lr=0.01)
for _ in range(3):
    gs = [torch.randn(p.shape, device="cuda", generator=gen) for p in ps]
    for x, y, g in zip(a, b, gs):
        x.grad = g.clone()
        y.grad = g.clone()
    oa.step()
    ob.step()
res["max_abs_diff"] = max((x - y).abs().max().item() for x, y in zip(a, b))
res["bitwise"] = all(torch.equal(x, y) for x, y in zip(a, b))
print({k: v for k, v in res.items() if k != "rounds"}, flush=True)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import interleaved_rounds, mlperf_trainer  # noqa: E402
tr = mlperf_trainer()
opts = {"fused": tr.optimizer, "torch foreach": torch.optim.Adagrad(tr.model.dense_parameters(), lr=tr.cfg.lr)}
assert isinstance(opts["fused"], FusedAdagrad)
for _ in range(5):
    tr.train_step()
tr.sync()
res["rounds"] = interleaved_rounds(tr, {name: functools.partial(setattr, tr, "optimizer", opt)
                                        for name, opt in opts.items()}, 3, key="optimizer")
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_fused_adagrad.json"), "w"), indent=1)
