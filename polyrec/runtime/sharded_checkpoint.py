"""Sharded embedding checkpoints: one file per rank, resumable on a different number of ranks.

Layout of a checkpoint directory::

    manifest.json            format version, world size, step, embedding optimizer, the caller's extra
    emb-rank<r>.pt           rank r's shards (table, rows, columns): weights and optimizer state

Every file is written to a temporary name and renamed into place (atomic on one filesystem), and
the manifest is written last by rank 0 after all ranks have finished theirs, so a directory with a
manifest is complete. Loading reads the pieces of every old rank that overlap the new shards, so
a checkpoint from 2 ranks resumes on 1 or on 4 (resharding by the new plan).

Row-wise Adagrad keeps one accumulator per row of each shard; a column-wise shard's accumulator is
the mean over its own columns. Resharding column-wise pieces into a different column split takes
the width-weighted mean of the old accumulators: exact for table- and row-wise changes, an
approximation across column-split changes (documented in docs/distributed.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from polyrec.files import atomic_write
from polyrec.kernels.tbe import packed_views
from polyrec.runtime.checkpoint import atomic_save, load_torch_file
from polyrec.runtime.shards import Shard

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


def _shard_key(shard: Shard) -> dict[str, Any]:
    return {"table": shard.table, "kind": shard.kind, "rows": list(shard.rows), "cols": list(shard.cols)}


#: The packed buffers of a TableBatchedEmbedding a checkpoint holds, weights first.
BUFFERS = ("weights", "state1", "state2")


def _local_pieces(shards: list[Shard], tables) -> list[dict[str, torch.Tensor]]:
    """Per local shard: weights [rows, dim] and optimizer states ([rows] or [rows, dim])."""
    views = _table_views(tables)
    return [{name: held[i].detach().cpu() for name, held in views.items()} for i, _ in enumerate(shards)]


def _tbes(tables) -> list[tuple[Any, list[int]]]:
    """The TBEs that hold ``tables`` (a TableBatchedEmbedding, or a module of one per row dtype with ``tbes``
    and ``groups``: ``MixedShardTables``, ``MixedRowEmbeddings``), each with the positions of its tables."""
    if hasattr(tables, "tbes"):
        return list(zip(tables.tbes, tables.groups))
    return [(tables, list(range(len(tables.tables))))]


def _table_views(tables) -> dict[str, list[torch.Tensor]]:
    """``_buffer_views`` of the live buffers of ``tables`` (``_tbes``), each table's at its position."""
    merged: dict[str, dict[int, torch.Tensor]] = {}
    for tbe, positions in _tbes(tables):
        views = _buffer_views({name: getattr(tbe, name) for name in BUFFERS}, [(t.rows, t.dim) for t in tbe.tables],
                              per_row=tbe.optimizer.kind == "rowwise_adagrad")
        for name, held in views.items():
            merged.setdefault(name, {}).update(zip(positions, held))
    return {name: [held[i] for i in range(len(held))] for name, held in merged.items()}


def _optimizer_kind(tables) -> str:
    return _tbes(tables)[0][0].optimizer.kind


def _step(tables) -> int:
    """The optimizer steps ``tables`` have taken (their TBEs step together)."""
    return max(tbe.step for tbe, _ in _tbes(tables))


def _set_step(tables, step: int) -> None:
    for tbe, _ in _tbes(tables):
        tbe.step = step


def _buffer_views(flat: dict[str, torch.Tensor], shapes: list[tuple[int, int]], per_row: bool
                  ) -> dict[str, list[torch.Tensor]]:
    """Per packed buffer in ``flat`` ("weights", and "state1" / "state2" where the optimizer keeps them): each
    table's view, the tables of ``shapes`` as the module packs them; ``per_row``: row-wise state."""
    views = {"weights": packed_views(flat["weights"], shapes)}
    for name in BUFFERS[1:]:
        if flat[name].numel():
            views[name] = packed_views(flat[name], shapes, per_row=per_row)
    return views


def full_tables(tables) -> list[Shard]:
    """One shard per table covering all of it: unsharded tables (``_tbes``) as ``shards``."""
    return [Shard(table=t, kind="table", rank=0, rows=(0, w.shape[0]), cols=(0, w.shape[1]))
            for t, w in enumerate(_table_views(tables)["weights"])]


def save_sharded(directory: str | Path, shards: list[Shard], tables, *, rank: int, world_size: int, step: int,
                 extra: dict | None = None) -> None:
    """Every rank writes its ``shards`` (held in ``tables``, one table per shard: ``_tbes``); rank 0 writes the
    manifest once all have (collective when a process group is up)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {"shards": [_shard_key(s) for s in shards], "pieces": _local_pieces(shards, tables),
               "tbe_step": _step(tables)}
    atomic_save(payload, directory / f"emb-rank{rank}.pt")
    if dist.is_initialized():
        dist.barrier()
    if rank == 0:
        manifest = {"version": FORMAT_VERSION, "world_size": world_size, "step": step, "extra": extra or {},
                    "optimizer": _optimizer_kind(tables)}
        atomic_write(directory / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()),
                     prefix=f".{MANIFEST}-")
    if dist.is_initialized():
        dist.barrier()


def read_manifest(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{directory}: no {MANIFEST}: not a complete sharded checkpoint")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:  # truncated or overwritten: name the file, not the parser's state
        raise ValueError(f"{path} is damaged or not a polyrec shard manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise ValueError(f"{path} is damaged or not a polyrec shard manifest (it holds a {type(manifest).__name__})")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: format version {manifest.get('version')} != {FORMAT_VERSION}")
    return manifest


def _read_rank_file(path: Path) -> dict[str, Any]:
    """One rank's file; a file that does not load or lacks a rank file's keys raises ValueError naming it
    (as ``checkpoint.load_checkpoint`` does for checkpoint.pt), not torch's unpickling error."""
    damaged = f"{path} is damaged or not a polyrec shard file"
    payload = load_torch_file(path, damaged)
    missing = [key for key in ("shards", "pieces", "tbe_step") if not isinstance(payload, dict) or key not in payload]
    if missing:
        raise ValueError(f"{damaged} (it lacks {', '.join(missing)})")
    return payload


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None


def _fill(shard: Shard, old: list[tuple[dict, dict]], name: str, target: torch.Tensor) -> None:
    """Copy the overlap of every old piece of the shard's table into ``target`` (this shard's view)."""
    per_row = target.dim() == 1
    covered = torch.zeros(target.shape[0], dtype=torch.float64)
    acc = torch.zeros(target.shape, dtype=torch.float64)
    for key, piece in old:
        if key["table"] != shard.table or name not in piece:
            continue
        rows = _overlap(tuple(key["rows"]), shard.rows)
        cols = _overlap(tuple(key["cols"]), shard.cols)
        if rows is None or cols is None:
            continue
        # on the host: a live module's state (``export_state``) may be on the GPU
        src = piece[name][rows[0] - key["rows"][0]:rows[1] - key["rows"][0]].to("cpu", torch.float64)
        dst = slice(rows[0] - shard.rows[0], rows[1] - shard.rows[0])
        if per_row:  # width-weighted mean of the overlapping column pieces' accumulators
            width = cols[1] - cols[0]
            acc[dst] += src * width
            covered[dst] += width
        else:
            acc[dst, cols[0] - shard.cols[0]:cols[1] - shard.cols[0]] = src[:, cols[0] - key["cols"][0]:
                                                                            cols[1] - key["cols"][0]]
            covered[dst] += cols[1] - cols[0]
    if per_row:
        if bool((covered == 0).any()):
            raise ValueError(f"checkpoint lacks optimizer state for part of table {shard.table}")
        acc /= covered
    elif not bool((covered == shard.dim).all()):
        raise ValueError(f"checkpoint lacks {name} for part of table {shard.table} rows {shard.rows}")
    target.copy_(acc.to(target.dtype))


def load_sharded(directory: str | Path, shards: list[Shard], tables) -> dict[str, Any]:
    """Fill ``shards`` (held in ``tables``: ``_tbes``) from a checkpoint written by any number of ranks; return its
    manifest. ``full_tables(tables)`` as ``shards`` loads a sharded checkpoint into unsharded tables. The pieces
    are cast to the row dtype of the tables they fill (the trainer's resume asks for the saved dtypes)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest["optimizer"] != _optimizer_kind(tables):
        raise ValueError(f"checkpoint optimizer '{manifest['optimizer']}' != '{_optimizer_kind(tables)}'")
    old: list[tuple[dict, dict]] = []
    steps = set()
    for rank in range(manifest["world_size"]):
        payload = _read_rank_file(directory / f"emb-rank{rank}.pt")
        old += list(zip(payload["shards"], payload["pieces"]))
        steps.add(payload["tbe_step"])
    _fill_shards(shards, old, tables)
    _set_step(tables, max(steps))
    return manifest


def load_unsharded(saved: dict[str, Any], shards: list[Shard], tables) -> None:
    """Fill ``shards`` (held in ``tables``: ``_tbes``) from a one-process checkpoint's tables (their
    ``export_state``: one TableBatchedEmbedding's ``state_dict``, ``{"tbe": ...}``, or one per row dtype with the
    tables each holds, ``{"tbes": [...], "groups": [...]}``): every table is one table-wise piece, cut by the saved
    layout as the module packs them (``tbe.packed_views``)."""
    states = saved["tbes"] if "tbes" in saved else [saved["tbe"]]
    groups = saved.get("groups") if "tbes" in saved else [None]
    if groups is None or any("layout" not in state["_extra_state"] for state in states):
        raise ValueError("this one-process checkpoint predates the saved table layout: it resumes on one "
                         "process only (without torchrun)")
    old = []
    for state, group in zip(states, groups):
        extra = state["_extra_state"]
        shapes = [(rows, dim) for _, rows, dim, _ in extra["layout"]["tables"]]
        views = _buffer_views(state, shapes, per_row=extra["optimizer"] == "rowwise_adagrad")
        numbers = group if group is not None else range(len(shapes))
        old += [({"table": t, "kind": "table", "rows": [0, rows], "cols": [0, dim]},
                 {name: pieces[i] for name, pieces in views.items()})
                for i, (t, (rows, dim)) in enumerate(zip(numbers, shapes))]
    _fill_shards(shards, old, tables)
    _set_step(tables, max(int(state["_extra_state"]["step"]) for state in states))


def _fill_shards(shards: list[Shard], old: list[tuple[dict, dict]], tables) -> None:
    """Each of ``shards`` (held in ``tables``) from the overlapping ``old`` (key, piece) pairs."""
    views = _table_views(tables)
    with torch.no_grad():
        for i, shard in enumerate(shards):
            for name, held in views.items():
                _fill(shard, old, name, held[i])
