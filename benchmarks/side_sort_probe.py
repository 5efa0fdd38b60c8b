"""Probe (one H200 run, 2026-12-01): the TBE backward's id-only part (the forward's sort keys ->
torch.sort -> permute, ``TableBatchedEmbedding.prepare_backward``) on a side stream right after the
lookup, so that it could run under the dense half, against doing it in the backward (today). Full-size
``mlperf-dcnv2``, batch 65536, interleaved rounds of 20 steps. The backward waits for the side stream;
the prepared permute assumes a contiguous gradient, so with x0's strided gradient the backward redoes
it (0.15 ms). Writes ``$OUT/probe_side_sort.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/side_sort_probe.py
"""
import functools
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.models.embeddings import PolyrecEmbeddings
from polyrec.kernels.tbe import TableBatchedEmbedding
from polyrec.kernels.tbe_fused_backward import _tensors_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import interleaved_rounds, mlperf_trainer, warm_each  # noqa: E402

side = torch.cuda.Stream()
state = {"on": False}
orig_fwd, orig_bwd = PolyrecEmbeddings.forward, TableBatchedEmbedding._fused_backward

def fwd(self, values, offsets, batch_size):
    out = orig_fwd(self, values, offsets, batch_size)
    if state["on"] and torch.is_grad_enabled():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        for t in [values, offsets, *_tensors_of(self.tbe._forward_keys)]:
            t.record_stream(side)
        batch = self._jagged(values=values, offsets=offsets, batch_size=batch_size,
                             num_features=(offsets.numel() - 1) // batch_size)
        with torch.cuda.stream(side):
            self.tbe.prepare_backward(batch)
        for t in _tensors_of(self.tbe._prepared):
            t.record_stream(main)
    return out

def bwd(self, *a, **k):
    if state["on"]:
        torch.cuda.current_stream().wait_stream(side)
    return orig_bwd(self, *a, **k)

PolyrecEmbeddings.forward, TableBatchedEmbedding._fused_backward = fwd, bwd
tr = mlperf_trainer()
policies = {on: functools.partial(state.__setitem__, "on", on) for on in (False, True)}
warm_each(tr, policies, 4)
res = {"rounds": interleaved_rounds(tr, policies, 3, key="side_sort")}
loss = tr.train_step()
tr.sync()
res["finite_loss"] = bool(torch.isfinite(loss).item())
print(res["finite_loss"])
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_side_sort.json"), "w"), indent=1)
