"""What the trainer saves and restores: checkpoints (atomic, one file, or sharded per rank), the
semi-sync pipeline's batch in flight, and the check that no weight or state went non-finite.

``TrainerState`` holds these methods of ``polyrec.runtime.trainer.Trainer``; it reads the trainer's
model, optimizer, data source, configs and pipeline state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from polyrec.data import Batch
from polyrec.data.sources import canonical_spec
from polyrec.runtime import parallel
from polyrec.runtime.checkpoint import checkpoint_path, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from polyrec.runtime.config import row_dtype_spec, split_row_dtypes

#: What a trainer checkpoint holds (``TrainerState.save``); a file without one of them is refused.
CHECKPOINT_KEYS = ("step", "dense", "dense_optimizer", "data", "rng", "train_config", "model_config", "embeddings")
#: Settings a resumed run must share with its checkpoint (``TrainerState._check_resume_config``).
RESUME_MUST_MATCH = ("embedding_dtype", "embedding_optimizer", "dense_optimizer", "pipeline", "seed", "batch_size",
                     "data")

#: Dense state one precision has and another lacks: the fp8 roles' histories (``Fp8Scaling``'s buffer, at
#: ``<layer>.fp8.history``). A run resumed in fp8 from another precision's checkpoint starts them afresh (its
#: first step scales each role by its own maximum, as a new run's does); one resumed in another precision
#: drops them. The NaN stop's advice (``--precision fp32``) resumes an fp8 run so.
FP8_STATE_KEY = "fp8.history"
#: Elements checked per chunk when testing a (possibly 100 GB) table for NaN/inf: 2^26 bools = 64 MiB.
FINITE_CHECK_CHUNK = 1 << 26


class _SavedLookup(torch.autograd.Function):
    """A saved lookup's values on a re-run lookup's autograd graph: the gradient goes to the re-run lookup.
    Not written into the re-run's output: polyrec's lookup returns a view made in a custom Function, which
    autograd refuses to differentiate once changed in place."""

    @staticmethod
    def forward(ctx, rerun: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
        return saved.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def load_dense(part: nn.Module, saved: dict[str, torch.Tensor], where: str) -> None:
    """``part``'s saved state, the fp8 histories one precision lacks (``FP8_STATE_KEY``) aside; ValueError naming
    ``where`` and the entries for anything else missing or extra."""
    missing, unexpected = part.load_state_dict(saved, strict=False)
    misfits = [k for k in (*missing, *unexpected) if not k.endswith(FP8_STATE_KEY)]
    if misfits:
        raise ValueError(f"{where}: the checkpoint's dense state does not fit this run's layers "
                         f"(missing or extra: {', '.join(misfits)})")


#: Model fields of one value per table, named by the first table that differs (there are 26): (what, unit).
PER_TABLE = {"table_rows": ("table", "rows"), "multi_hot": ("feature", "lookups per sample")}
#: Model sizes that file data sets (``Source.adapt``), not the preset: the same file spec with other sizes is
#: files changed since the checkpoint.
DATA_SIZES = ("multi_hot", "num_dense")


def model_differences(saved: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Each field of two model configs (``dataclasses.asdict``) that differs, with both values; the per-table
    sizes by the first table that differs (``PER_TABLE``); only the name where the presets differ."""
    names = ["name"] if saved.get("name") != ours.get("name") else sorted(saved.keys() | ours.keys())
    differ = []
    for name in names:
        old, new = saved.get(name), ours.get(name)
        if old == new:
            continue
        if name in PER_TABLE and len(old) == len(new):
            first = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
            what, unit = PER_TABLE[name]
            differ.append(f"{name} ({what} {first}: {old[first]} {unit}; this run has {new[first]})")
        else:
            differ.append(f"{name} {old!r}; this run has {new!r}")
    return differ


def _compared(name: str, value: Any) -> Any:
    """A resume setting as compared with the checkpoint's: the data as one string per data (``canonical_spec``),
    the row dtypes as one name where every table has it."""
    if value is None:
        return value
    if name == "data":
        return canonical_spec(value)
    if name == "embedding_dtype":
        return row_dtype_spec(split_row_dtypes(value))
    return value


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """No NaN/inf in any floating tensor (chunked, so a 100 GB table needs no 25 GB mask)."""
    for t in tensors:
        if not t.is_floating_point():
            continue
        flat = t.detach().reshape(-1)
        for start in range(0, flat.numel(), FINITE_CHECK_CHUNK):
            if not bool(torch.isfinite(flat[start:start + FINITE_CHECK_CHUNK]).all()):
                return False
    return True


def map_tensors(state: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of a nested state (dicts, lists, tuples) with ``fn`` of every tensor; other values as they are."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {k: map_tensors(v, fn) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(map_tensors(v, fn) for v in state)
    return state


def to_cpu(state: Any) -> Any:
    """A copy of a nested state with every tensor on the CPU (to gather it across ranks)."""
    return map_tensors(state, torch.Tensor.cpu)


def state_tensors(state: Any) -> list[torch.Tensor]:
    """Every tensor of a nested state: dicts, and lists or tuples (one state dict per TBE of mixed row dtypes)."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in state_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in state_tensors(v)]
    return []


class TrainerState:
    """The trainer's checkpoint and finiteness methods (see the module docstring)."""

    def finite_state(self) -> bool:
        self.drain()
        finite = all_finite(list(self.model.dense_parameters()) + state_tensors(self.optimizer.state_dict())
                            + state_tensors(self.model.embeddings.export_state()))
        return parallel.all_ranks_true(finite, self.rt.device) if self.distributed else finite

    def save(self) -> Path:
        self.drain()
        directory = Path(self.cfg.checkpoint_dir)
        state = {"step": self.step,
                 "eval_owed": self.eval_owed,
                 "dense": {name: part.state_dict() for name, part in self._dense_named()},
                 "dense_optimizer": self.optimizer.state_dict(),
                 "data": self._ahead[0][0] if self._ahead else self.source.state_dict(),
                 "rng": rng_state(self.rt.device),
                 "prefetched": self._prefetched_state(),
                 # the data as absolute paths: a relative one means another file from another working directory
                 "train_config": self.cfg.as_dict() | {"embedding_backend": self.rt.embedding_backend,
                                                       "data": canonical_spec(self.cfg.data)},
                 "model_config": dataclasses.asdict(self.model_config)}
        if not self.distributed:
            return save_checkpoint(directory, state | {"embeddings": self.model.embeddings.export_state()})
        # every rank writes its shards; rank 0 writes the rest with every rank's data and RNG position
        pointer = parallel.save_shards(directory, self.model.embeddings, self.step)
        state |= {"embeddings": pointer, "data_by_rank": parallel.gather(to_cpu(state["data"])),
                  "rng_by_rank": parallel.gather(to_cpu(state["rng"]))}
        if self.ctx.is_main:
            save_checkpoint(directory, state)
            parallel.drop_old_shards(directory, pointer["sharded"])
        parallel.barrier()
        return checkpoint_path(directory)

    def _prefetched_state(self) -> dict[str, torch.Tensor] | None:
        """The semi-sync pipeline's batch in flight and its (one update old) lookup, so resume is exact."""
        if self._prefetched is None:
            return None
        batch, emb, _ = self._prefetched
        return {"dense": batch.dense, "values": batch.values, "offsets": batch.offsets, "labels": batch.labels,
                "emb": emb.detach()}

    def _restore_prefetched(self, state: dict[str, torch.Tensor] | None) -> None:
        if state is None:
            return
        dev = self.rt.device
        batch = Batch(dense=state["dense"].to(dev), values=state["values"].to(dev), offsets=state["offsets"].to(dev),
                      labels=state["labels"].to(dev))
        # re-run the lookup for its autograd graph (the backward applies this batch's update), with the saved
        # output, read from the tables one update before the checkpoint, as its values
        emb = self.model.embed(batch.values, batch.offsets, batch.batch_size)
        self._prefetched = (batch, _SavedLookup.apply(emb, state["emb"].to(dev)), None)

    def _dense_named(self) -> list[tuple[str, nn.Module]]:
        return [(n, m) for n, m in (("bottom", self.model.bottom), ("cross", self.model.cross), ("top", self.model.top))
                if m is not None]

    def restore(self) -> None:
        """Continue from checkpoint_dir/checkpoint.pt: weights, optimizer states, data position, RNG."""
        state = load_checkpoint(Path(self.cfg.checkpoint_dir), required=CHECKPOINT_KEYS)
        self._check_resume_config(state["train_config"])  # first: other data makes another model too
        saved, ours = state["model_config"], dataclasses.asdict(self.model_config)
        differ = model_differences(saved, ours)
        if differ:
            data_made = not self.cfg.data.startswith("synthetic") and all(
                saved.get(name) == ours.get(name) for name in saved.keys() | ours.keys() if name not in DATA_SIZES)
            advice = ("the data's files changed since the checkpoint was written (they set the model's lookups per "
                      "sample and dense features): restore them" if data_made else
                      "resume with its --preset, --row-cap and --plan")
            raise ValueError(f"{checkpoint_path(Path(self.cfg.checkpoint_dir))} holds another model, "
                             f"{', and '.join(differ)}: {advice}, or start a new checkpoint directory")
        for name, part in self._dense_named():
            load_dense(part, state["dense"][name], f"{checkpoint_path(Path(self.cfg.checkpoint_dir))}: {name}")
        if "sharded" in state["embeddings"]:
            parallel.load_shards(Path(self.cfg.checkpoint_dir), self.model.embeddings, state["embeddings"])
        else:
            self.model.embeddings.import_state(state["embeddings"])
        self.optimizer.load_state_dict(state["dense_optimizer"])
        # this rank's stream position (parallel.data_position); a rank the checkpoint lacks keeps its fresh RNG
        rank, world = (self.ctx.rank, self.ctx.world_size) if self.distributed else (0, 1)
        rngs = state.get("rng_by_rank") or [state["rng"]]
        data = parallel.data_position(state.get("data_by_rank") or [state["data"]], rank, world, self.cfg.batch_size)
        if data is not None:
            self.source.load_state_dict(data)
        if rank < len(rngs):
            set_rng_state(rngs[rank], self.rt.device)
        self.step = int(state["step"])
        self.eval_owed = bool(state.get("eval_owed", False))  # older checkpoints owe none
        self._apply_learning_rates(state["train_config"])
        self._restore_prefetched(state.get("prefetched"))

    def _check_resume_config(self, saved: dict[str, Any]) -> None:
        """The run continues the checkpoint's run: same row storage and optimizers (loading fp32 rows into
        fp16 tables, or one optimizer's state into another's, would convert or fail), embedding backend,
        pipeline (a semi-sync batch in flight), seed, batch size and data (the saved stream position; compared as
        ``canonical_spec``: ``synthetic`` is ``synthetic:zipf``, a relative path the absolute one; a checkpoint holds
        it so, a relative path made absolute from the working directory of the run that saved it).
        Every field that differs is named. Checkpoints from before ``embedding_dtype`` existed hold fp32
        rows; those that saved ``embedding_backend`` as "auto" are not checked for it."""
        path = checkpoint_path(Path(self.cfg.checkpoint_dir))
        ours = {name: getattr(self.cfg, name) for name in RESUME_MUST_MATCH} | {
            "embedding_backend": self.rt.embedding_backend}
        saved = {"embedding_dtype": "fp32"} | saved
        if saved.get("embedding_backend") == "auto":
            saved["embedding_backend"] = self.rt.embedding_backend
        differ = [f"{name} {saved.get(name)!r}; this run has {value!r}" for name, value in ours.items()
                  if _compared(name, saved.get(name)) != _compared(name, value)]
        if differ:
            raise ValueError(f"{path} holds {', and '.join(differ)}: resume with the same settings, or start a "
                             "new checkpoint directory")

    def _apply_learning_rates(self, saved: dict[str, Any]) -> None:
        """This run's --lr and --embedding-lr hold after a resume (an optimizer's loaded state brings back
        the lr it was saved with); a change from the checkpoint's is logged."""
        emb_lr, saved_emb_lr = self.cfg.embedding_lr or self.cfg.lr, saved.get("embedding_lr") or saved.get("lr")
        emb_optimizer = getattr(self.model.embeddings, "optimizer", None)  # torch's EmbeddingBag path only
        for optimizer, lr in ((self.optimizer, self.cfg.lr), (emb_optimizer, emb_lr)):
            for group in optimizer.param_groups if optimizer is not None else ():
                group["lr"] = lr
        if (saved.get("lr"), saved_emb_lr) != (self.cfg.lr, emb_lr):
            self.log.write({"event": "lr_changed", "step": self.step, "lr": self.cfg.lr, "embedding_lr": emb_lr,
                            "checkpoint_lr": saved.get("lr"), "checkpoint_embedding_lr": saved_emb_lr})
