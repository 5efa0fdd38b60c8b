"""The first step's Triton kernels compiled in parallel, before it runs (``TrainConfig.precompile``).

A cold first step compiles each Triton kernel when it first launches, one after another. Here the
trainer first runs ``DRY_STEPS`` steps and one evaluation forward (the first evaluation's kernels) under
``polyrec.kernels.precompile.recording_launches`` (no Triton kernel compiles or runs; torch's ops and the
library GEMMs do, on whatever the skipped kernels left in their outputs), puts back every piece of state
such a step changes (:class:`StepSnapshot`), then compiles the recorded kernels on a thread per core. The
real first step then finds them compiled.

What a dry step may change, and what :class:`StepSnapshot` puts back: the dense parts' parameters and
buffers (torch's ops, e.g. Adam's, write them; putting them back in place also makes every kept
compute-dtype copy stale, ``polyrec.kernels.master_copies``, and re-reads the fp8 roles' histories,
``Fp8Scaling``), the dense optimizer's state, the embedding TBEs' step counts, the data position, the
RNG, the trainer's step count and its phase timer. The embedding tables and their optimizer state are
written by Triton kernels only (polyrec's TBE): a dry step leaves them as they were, and they are not
copied (100 GB at full MLPerf size). So the dry run is for runs whose embeddings are polyrec's, on one
process, with the synchronous pipeline (:func:`applies`).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from polyrec.kernels import precompile
from polyrec.kernels.gemm import selecting_as_captured
from polyrec.models.embeddings import tbe_modules
from polyrec.runtime.checkpoint import rng_state, set_rng_state
from polyrec.runtime.metrics import PhaseTimer
from polyrec.runtime.trainer_state import map_tensors

#: Dry steps: the first takes the fp8 roles' first-step path (scaled by their own maxima); the second, with
#: every role seen, the path of all later steps (copies written by the passes that make the tensors). Both
#: eager (a capture in the dry run left no kernel to compile, but a later capture in the same process failed:
#: docs/training.md); a graphed run's select their GEMMs as its capture will (:func:`dense_selection`).
DRY_STEPS = 2


@dataclass(slots=True)
class ColdStart:
    """What the dry run found and cost."""

    kernels: int  # compiles recorded
    dry_s: float  # wall seconds of the dry steps and the state put back
    compile_s: float  # wall seconds of the parallel compiles and launcher builds


def applies(trainer: Any) -> str | None:
    """None when ``trainer`` can precompile, else why not."""
    if not trainer.cfg.precompile:
        return "off (precompile=False)"
    if trainer.rt.device.type != "cuda":
        return "not on a GPU"
    if trainer.distributed:
        return "several ranks"
    if trainer.cfg.pipeline != "sync":
        return "the semi-sync pipeline"
    if trainer.rt.embedding_backend != "polyrec":
        return "torch's embedding tables (their optimizer writes them with torch ops)"
    if not precompile.supported():
        return "Triton's JIT is not 3.6's (or runs in the interpreter)"
    return None


def _cloned(state: Any) -> Any:
    """A copy of a nested state whose tensors are fresh clones (not views of the live ones)."""
    return map_tensors(state, lambda t: t.detach().clone())


def _put_back(live: dict, saved: dict) -> None:
    """Make ``live`` (a nested dict) equal ``saved``: tensors written in place (whoever holds them sees the
    old values again), other values replaced, entries the dry run added removed."""
    for k in list(live):
        if k not in saved:
            del live[k]
        elif isinstance(live[k], torch.Tensor):
            live[k].copy_(saved[k])
        elif isinstance(live[k], dict):
            _put_back(live[k], saved[k])
        else:
            live[k] = saved[k]


@dataclass(slots=True)
class StepSnapshot:
    """The trainer state a dry step may change (module docstring), taken before and put back after."""

    dense: dict[str, dict[str, Any]]
    optimizer_state: dict  # parameter -> its state; an optimizer that makes state in its first step has none yet
    embedding_steps: list[int]  # polyrec's TBEs count their steps (stochastic rounding's seeds); torch's tables do not
    data: dict
    rng: dict
    step: int

    @classmethod
    def take(cls, trainer: Any) -> StepSnapshot:
        return cls(dense={name: _cloned(part.state_dict()) for name, part in trainer._dense_named()},
                   optimizer_state={p: _cloned(s) for p, s in trainer.optimizer.state.items()},
                   embedding_steps=[tbe.step for tbe in tbe_modules(trainer.model.embeddings)],
                   data=_cloned(trainer.source.state_dict()),
                   rng=rng_state(trainer.rt.device), step=trainer.step)

    def restore(self, trainer: Any) -> None:
        with torch.no_grad():
            for name, part in trainer._dense_named():
                part.load_state_dict(self.dense[name])  # in place: versions bumped, fp8 histories re-read
            _put_back(trainer.optimizer.state, self.optimizer_state)
        for p in trainer.model.dense_parameters():
            p.grad = None
        for tbe, step in zip(tbe_modules(trainer.model.embeddings), self.embedding_steps, strict=True):
            tbe.step = step
        trainer.source.load_state_dict(self.data)
        set_rng_state(self.rng, trainer.rt.device)
        trainer.step = self.step


def dense_selection(trainer: Any) -> AbstractContextManager:
    """How the dry steps select their GEMMs: as the CUDA graph's capture will (by GPU time alone) where the
    run is graphed, so those kernels are compiled here too; else as the eager steps will."""
    return selecting_as_captured() if trainer.graphs.on else nullcontext()


def _dry_evaluation(trainer: Any) -> None:
    """One held-out forward as ``Trainer.evaluate`` runs it (eager, no autograd) on the next training batch:
    the first evaluation's kernels, at the full batch size (``Trainer.evaluate`` pads a short last held-out
    batch to it)."""
    with torch.no_grad():
        trainer.eval_logits(trainer.source.next_batch().to(trainer.rt.device))


def precompile_first_step(trainer: Any) -> ColdStart:
    """Run the recorded dry steps of ``trainer`` (``trainer.dry_steps`` True meanwhile: nothing is captured
    into a CUDA graph) and a dry evaluation, put its state back, and compile what they launched, in parallel."""
    start = time.perf_counter()
    snapshot = StepSnapshot.take(trainer)
    timer = trainer.timer
    trainer.timer, trainer.dry_steps = PhaseTimer(trainer.rt.device), True
    try:
        with precompile.recording_launches() as records:
            with dense_selection(trainer):
                for _ in range(DRY_STEPS):
                    trainer.train_step()
            _dry_evaluation(trainer)
        torch.cuda.synchronize(trainer.rt.device)
    finally:
        trainer.timer, trainer.dry_steps = timer, False
        snapshot.restore(trainer)
    dry_s = time.perf_counter() - start
    return ColdStart(kernels=len(records), dry_s=dry_s, compile_s=precompile.compile_recorded(records))
