"""A/B (one H200 run, 2026-12-01): the fused cross network's weight-gradient GEMMs on a side stream
(``LowRankCross.wgrad_stream``), beside the backward's passes and input-gradient GEMMs on the main
stream, against one stream. Full-size ``mlperf-dcnv2``, batch 65536, interleaved rounds of 20 steps;
first the cross network's gradients on random inputs with and without the side stream (bitwise).
``overlap_probe.py`` found high-priority GEMMs beside memory-bound kernels the better split.
Writes ``$OUT/probe_wgrad_stream.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/wgrad_stream_ab.py
"""
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.kernels.dcn import cross_network
from polyrec.runtime import TrainConfig, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import step_ms  # noqa: E402

STREAMS = {"one stream": None, "side, high priority": torch.cuda.Stream(priority=-1),
           "side, same priority": torch.cuda.Stream()}


def cross_grads(stream) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(1)
    b, d, r = 4096, 3456, 512
    x0 = torch.randn(b, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
    ws = [(torch.randn(s, device="cuda", generator=gen) * 0.02).to(torch.bfloat16).requires_grad_()
          for _ in range(3) for s in ((r, d), (d, r), (d,))]
    vs, us, bs = ws[0::3], ws[1::3], ws[2::3]
    out = cross_network(x0, vs, us, bs, wgrad_stream=stream)
    out.backward(torch.randn(b, d, device="cuda", generator=gen, dtype=torch.bfloat16))
    return [x0.grad, *(w.grad for w in ws)]


res = {"rounds": []}
ref = cross_grads(None)
res["bitwise"] = {name: all(torch.equal(a, b) for a, b in zip(ref, cross_grads(s)))
                  for name, s in STREAMS.items() if s is not None}
print(res["bitwise"], flush=True)
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda")
tr = Trainer(cfg, progress=False)
for stream in STREAMS.values():
    tr.model.cross.wgrad_stream = stream
    for _ in range(3):
        tr.train_step()
tr.sync()
for r in range(3):
    for name, stream in STREAMS.items():
        tr.model.cross.wgrad_stream = stream
        row = {"round": r, "wgrads": name, "ms_per_step": step_ms(tr)}
        res["rounds"].append(row)
        print(row, flush=True)
loss = tr.train_step()
tr.sync()
res["finite_loss"] = bool(torch.isfinite(loss).item())
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_wgrad_stream.json"), "w"), indent=1)
