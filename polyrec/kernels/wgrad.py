"""Weight gradients taken out of the backward's order, to run beside the embedding backward.

A dense layer's weight gradient (``gradᵀ @ x``) is needed only by the optimizer step, while its input
gradient is on the path to the embedding gradient. With a :class:`DeferredWeightGrads` queue the
polyrec autograd Functions (``gemm.linear``, ``dcn.cross_network``) return no gradient for their
weights and queue the GEMM instead; ``launch`` runs the queue on a high-priority side stream once
the dense backward is issued, so the GEMMs (compute-bound) run while the main stream's embedding
backward (memory-bound) fills the SMs around them, and ``wait`` joins before the optimizer reads
the gradients. Measured on one H200 (``benchmarks/results/overlap_probe_2026-12-01``): the MLPerf
TBE backward and the model's 14 weight-gradient GEMMs took 8.03 ms one after the other, 7.52 ms
this way; launched as soon as each layer's backward ran they only slowed the dense backward.

Each gradient is computed by the same GEMM as in the backward and cast to its fp32 master's dtype
as autograd's cast would, then accumulated into the master's ``.grad`` as autograd does: the values
are bitwise those of the undeferred step. Autograd does not see these gradients, so nothing may
rely on its hooks for them (DDP's all-reduce: one process only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class _Job:
    master: torch.Tensor  # the fp32 leaf parameter whose .grad receives the result
    compute: Callable[[], torch.Tensor]  # the weight gradient, in the compute dtype
    reads: tuple[torch.Tensor, ...]  # tensors ``compute`` reads (kept alive for the side stream)


class DeferredWeightGrads:
    """A queue of weight-gradient GEMMs; one per process, shared by the model's layers."""

    def __init__(self) -> None:
        self._jobs: list[_Job] = []
        self._stream: torch.cuda.Stream | None = None
        self._launched_on: torch.cuda.Stream | None = None

    def __len__(self) -> int:
        return len(self._jobs)

    def defer(self, master: torch.Tensor, compute: Callable[[], torch.Tensor], *reads: torch.Tensor) -> None:
        """Queue ``compute`` (the gradient of the weight cast from ``master``) for ``launch``."""
        if not master.is_leaf:
            raise ValueError("DeferredWeightGrads.defer: the master must be a leaf parameter")
        self._jobs.append(_Job(master=master, compute=compute, reads=reads))

    def launch(self) -> None:
        """Run the queued GEMMs: on a CUDA device on a high-priority side stream after the work queued
        so far, elsewhere in place. The queue is empty after."""
        jobs, self._jobs = self._jobs, []
        if not jobs:
            return
        device = jobs[0].master.device
        if device.type != "cuda":
            for job in jobs:
                _accumulate(job.master, job.compute())
            return
        main = torch.cuda.current_stream(device)
        if self._stream is None or self._stream.device != device:
            self._stream = torch.cuda.Stream(device=device, priority=-1)
        self._stream.wait_stream(main)
        with torch.cuda.stream(self._stream):
            for job in jobs:
                _accumulate(job.master, job.compute())
                job.master.grad.record_stream(main)  # the optimizer reads it on the main stream
        for job in jobs:
            for t in job.reads:
                t.record_stream(self._stream)
        self._launched_on = main

    def wait(self) -> None:
        """Make the stream ``launch`` was called from wait for the GEMMs (no-op if none ran there)."""
        if self._launched_on is not None:
            self._launched_on.wait_stream(self._stream)
            self._launched_on = None


def _accumulate(master: torch.Tensor, grad: torch.Tensor) -> None:
    """``master.grad += grad`` as autograd accumulates a leaf's gradient (cast to its dtype first)."""
    grad = grad.to(master.dtype)
    if master.grad is None:
        master.grad = grad
    else:
        master.grad.add_(grad)
