"""Table-batched embedding: many tables in one flat buffer, pooled and sequence lookups, and a
backward that applies the optimizer in place (no dense gradient). See docs/tbe.md.

Output of ``forward``: ``[B, sum of the pooled features' dims]`` in ``output_dtype`` (fp32 by
default, whatever the weight precision), features in order, features of pooling "none" tables left
out (they are read with ``lookup_sequence``). Its autograd backward sorts the ids, reduces duplicates
exactly and updates weights and optimizer state in place: call ``loss.backward()`` and the
embeddings have taken their step; there is no ``.grad`` and no separate ``optimizer.step()``.
"""

from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass

import torch
import triton
from torch import Tensor

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe_forward import (FLAG_BAD_ENDS, FLAG_BAD_ID, FLAG_BAD_OFFSETS, TableLayout, block_d, loop_trips,
                                         vector_width)
from polyrec.kernels.tbe_forward_plan import ForwardLaunch, plan_forward
from polyrec.kernels.tbe_fused_backward import FusedBackward, KeyPlan, SortedIds, SortKeys
from polyrec.kernels.tbe_lookups import Lookups
from polyrec.kernels.tbe_optim import STATE_PER_ELEMENT, STATE_PER_ROW, EmbeddingOptimizer

POOLINGS = ("sum", "mean", "none")
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: ``perfmodel.tbe.UpdateShape.rounding`` of the row dtypes whose updates round stochastically.
ROUNDED_ROWS = {torch.float16: "fp16", torch.bfloat16: "bf16"}
OUTPUT_DTYPES = WEIGHT_DTYPES  # the update's cost model prices gradients of 4 and 2 bytes

__all__ = ["EmbeddingOptimizer", "TableSpec", "TableBatchedEmbedding", "JaggedBatch"]


@dataclass(kw_only=True, slots=True)
class TableSpec:
    """One embedding table."""

    name: str
    rows: int  # number of rows (ids 0 .. rows-1)
    dim: int  # embedding dimension
    pooling: str = "sum"  # "sum" | "mean" | "none" (sequence: read with lookup_sequence)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"table name must be a non-empty string, got {self.name!r}")
        # plain str and int (not numpy's): the checkpoint's layout holds them (torch.load(weights_only=True))
        self.name, self.pooling = str(self.name), str(self.pooling)
        self.rows = as_int(self.rows, f"table '{self.name}': rows")
        self.dim = as_int(self.dim, f"table '{self.name}': dim")
        if self.rows <= 0 or self.dim <= 0:
            raise ValueError(f"table '{self.name}': rows and dim must be > 0, got {self.rows}, {self.dim}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"table '{self.name}': pooling must be one of {POOLINGS}, got '{self.pooling}'")


class TableBatchedEmbedding(Lookups, FusedBackward, torch.nn.Module):
    """All tables of one weight precision in one flat buffer, with a fused sparse optimizer (its
    lookups: ``tbe_lookups.Lookups``; its backward: ``tbe_fused_backward.FusedBackward``)."""

    def __init__(self, tables: list[TableSpec], *, optimizer: EmbeddingOptimizer, weight_dtype=torch.float32,
                 feature_to_table: list[int] | None = None, device=None, seed: int = 0, deterministic: bool = False,
                 init_scale: float | None = None, output_dtype=torch.float32, debug_checks: bool = False,
                 update_config: tbe_select.UpdateConfig | None = None, group_dims: bool | None = None,
                 output_columns: tuple[list[int], int] | None = None):
        """``output_columns``: (each feature's first column, the output's width), for a module that holds some
        of a caller's features and writes their columns of the caller's wider output (several such modules
        share one output: ``tbe_lookups.lookup_shared``); its backward reads those columns of the gradient.
        None: the pooled features one after another. ``update_config`` forces the update kernel's variant, tile
        and warps (benchmarks compare variants with it); by default the cost model chooses
        (``tbe_select.select_update``).
        ``group_dims``: tables whose dims take several BLOCK_D are updated by one launch per group (True),
        by one launch at the widest (False), or as the cost model says per batch (None,
        ``tbe_select.groups_pay``)."""
        super().__init__()
        if not tables:
            raise ValueError("TableBatchedEmbedding needs at least one table")
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype must be one of {WEIGHT_DTYPES}, got {weight_dtype}")
        if output_dtype not in OUTPUT_DTYPES:
            raise ValueError(f"output_dtype must be one of {OUTPUT_DTYPES}, got {output_dtype}")
        if init_scale is not None and not (math.isfinite(init_scale) and init_scale >= 0):
            raise ValueError(f"init_scale must be finite and >= 0 (or None: sqrt(1/rows) per table), got {init_scale}")
        _check_unique_names(tables)
        feature_to_table = [as_int(t, f"feature_to_table[{f}]") for f, t in
                            enumerate(range(len(tables)) if feature_to_table is None else feature_to_table)]
        for f, t in enumerate(feature_to_table):
            if not 0 <= t < len(tables):
                raise ValueError(f"feature_to_table[{f}] = {t} is not a table index (0..{len(tables) - 1})")
        self.tables, self.feature_to_table, self.optimizer = list(tables), feature_to_table, optimizer
        # How errors number the features: a caller's numbers where this module holds some of its features
        # (``polyrec.models.mixed_embeddings``); None: 0, 1, ...
        self.feature_numbers: list[int] | None = None
        self.weight_dtype, self.output_dtype = weight_dtype, output_dtype
        self.deterministic, self.debug_checks, self.seed = deterministic, debug_checks, as_int(seed, "seed")
        self.update_config, self.group_dims = update_config, group_dims
        self.output_columns = output_columns
        # The step waits on the host (the trainer says so from the planner's prediction): the update's
        # selection then weighs its launches' host issue (tbe_select.select_update's host_bound)
        self.host_bound = False
        self.staged_forward: bool | None = None  # pooled_forward_kernel's STAGED; None: tbe_select.staged_loads
        # On the CPU, keep flagged bad input for check_errors instead of raising in the lookup (sharded
        # tables: every rank checks at the same point, polyrec.runtime.sharding)
        self.defer_errors = False
        self.step = 0
        device = torch.device(device) if device is not None else torch.device("cpu")
        dims = [t.dim for t in tables]
        self.block_d = block_d(dims)
        self.vec = vector_width(dims, torch.tensor([], dtype=weight_dtype).element_size())
        self.t_pad = triton.next_power_of_2(len(tables))
        self._build_layout(device)
        self._allocate(device, init_scale)
        self._configs: dict[tuple, object] = {}
        self._pending_flags: tuple[Tensor, torch.cuda.Event] | None = None
        self._prepared: SortedIds | None = None  # prepare_backward's sort, for the next backward
        self._forward_keys: SortKeys | None = None  # the last trained pooled forward's sort keys
        self.backward_stream: torch.cuda.Stream | None = None  # see FusedBackward.backward_side

    # ---- construction -------------------------------------------------------------------------
    def _build_layout(self, device: torch.device) -> None:
        rows = [t.rows for t in self.tables]
        elems = [t.rows * t.dim for t in self.tables]
        row_base = [0] + list(_cumsum(rows))[:-1]
        elem_base = [0] + list(_cumsum(elems))[:-1]
        self.total_rows, self.total_elems = sum(rows), sum(elems)
        dims = {t.dim for t in self.tables}
        # one dim for all tables: row r of the packed buffer starts at element r * dim (the update kernels
        # then look no table up); 0 when the dims differ
        self.one_dim = dims.pop() if len(dims) == 1 else 0
        blocks = [block_d([t.dim]) for t in self.tables]
        self.dim_blocks = sorted(set(blocks))  # BLOCK_D of each dim group, ascending
        key_base = [self.dim_blocks.index(b) * self.total_rows + base for b, base in zip(blocks, row_base)]
        cols, self.output_dim = feature_columns(self.tables, self.feature_to_table, self.output_columns)
        self.pooled_features = [f for f, c in enumerate(cols) if c >= 0]
        self.sequence_features = [f for f, c in enumerate(cols) if c < 0]
        seq_dims = {self.tables[self.feature_to_table[f]].dim for f in self.sequence_features}
        self.sequence_dim = seq_dims.pop() if len(seq_dims) == 1 else (0 if not seq_dims else -1)
        i32, i64 = torch.int32, torch.int64
        self.layout = TableLayout(
            feat_table=torch.tensor(self.feature_to_table, dtype=i32, device=device),
            feat_col=torch.tensor(cols, dtype=i32, device=device),
            feat_mean=torch.tensor([self.tables[t].pooling == "mean" for t in self.feature_to_table], dtype=i32,
                                   device=device),
            table_rows=torch.tensor(rows, dtype=i64, device=device),
            table_row_base=torch.tensor(row_base, dtype=i64, device=device),
            table_key_base=torch.tensor(key_base, dtype=i64, device=device),
            table_elem_base=torch.tensor(elem_base, dtype=i64, device=device),
            table_dim=torch.tensor([t.dim for t in self.tables], dtype=i32, device=device),
            total_rows=self.total_rows)
        self._pooled_ids = torch.tensor(self.pooled_features, dtype=i32, device=device)
        self._sequence_ids = torch.tensor(self.sequence_features, dtype=i32, device=device)

    def _allocate(self, device: torch.device, init_scale: float | None) -> None:
        weights = torch.empty(self.total_elems, dtype=self.weight_dtype, device=device)
        gen = torch.Generator(device=device).manual_seed(self.seed)
        for t, view in zip(self.tables, self._split(weights)):
            scale = init_scale if init_scale is not None else math.sqrt(1.0 / t.rows)
            view.uniform_(-scale, scale, generator=gen)
        self.register_buffer("weights", weights)
        kind, init = self.optimizer.kind, self.optimizer.initial_accumulator_value
        per_elem, per_row = STATE_PER_ELEMENT[kind], STATE_PER_ROW[kind]
        state1 = torch.empty(0, dtype=torch.float32, device=device)
        state2 = torch.empty(0, dtype=torch.float32, device=device)
        if per_row:
            state1 = torch.full((self.total_rows,), init, dtype=torch.float32, device=device)
        elif per_elem:
            state1 = torch.full((self.total_elems,), init if kind == "adagrad" else 0.0, dtype=torch.float32,
                                device=device)
        if per_elem == 2:
            state2 = torch.zeros(self.total_elems, dtype=torch.float32, device=device)
        self.register_buffer("state1", state1)
        self.register_buffer("state2", state2)
        self.register_buffer("flags", torch.zeros(len(self.feature_to_table), dtype=torch.int32, device=device),
                             persistent=False)

    def _apply(self, fn, recurse=True):
        """Moves (``.to(device)``, ``.cuda()``) apply; a dtype change (``.half()``, ``.to(dtype)``) is refused
        before anything changes: it would cast the fp32 optimizer state too, with ``weight_dtype`` (and so
        stochastic rounding) left as built (an fp16 Adagrad sum overflowed and froze its row). A move forgets
        the configs: they were selected for the old device, and the forward's plans hold its feature-id tensors."""
        for dtype in {self.weights.dtype, torch.float32}:
            if fn(torch.empty(0, dtype=dtype, device=self.weights.device)).dtype != dtype:
                raise TypeError(f"TableBatchedEmbedding: its rows are {self.weights.dtype} and its optimizer state "
                                "fp32, set when it was built (weight_dtype); a dtype change would cast both. Build "
                                "it with the row dtype wanted, and move it with .to(device)")
        before = self.weights.device
        super()._apply(fn, recurse)
        if self.weights.device != before:
            self._configs.clear()
        self.layout = self.layout.to(self.weights.device)
        self._pooled_ids = self._pooled_ids.to(self.weights.device)
        self._sequence_ids = self._sequence_ids.to(self.weights.device)
        return self

    def _split(self, flat: Tensor) -> list[Tensor]:
        return packed_views(flat, [(t.rows, t.dim) for t in self.tables])

    def table_weights(self) -> list[Tensor]:
        """Views [rows, dim] of each table's weights in the flat buffer."""
        return self._split(self.weights)

    def table_state(self) -> list[Tensor]:
        """Views of each table's first optimizer state: [rows] (rowwise), [rows, dim] (per element)."""
        if self.optimizer.kind == "rowwise_adagrad":
            bounds = [0] + list(_cumsum([t.rows for t in self.tables]))
            return [self.state1[a:b] for a, b in zip(bounds, bounds[1:])]
        return self._split(self.state1) if self.state1.numel() else []

    def get_extra_state(self) -> dict:
        return {"step": self.step, "seed": self.seed, "optimizer": self.optimizer.kind, "layout": self._layout_state()}

    def set_extra_state(self, state: dict) -> None:
        """The step count, and the seed the deterministic rounding derives from (a checkpoint written before
        the seed was stored keeps this module's)."""
        self.step = int(state["step"])
        self.seed = int(state.get("seed", self.seed))

    def _layout_state(self) -> dict:
        """How the flat buffers are packed, as plain lists and strings (checkpoints load with weights_only)."""
        return {"tables": [[t.name, t.rows, t.dim, t.pooling] for t in self.tables],
                "feature_to_table": list(self.feature_to_table),
                "weight_dtype": str(self.weight_dtype).removeprefix("torch.")}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Check the checkpoint's extra state before any buffer is copied: a checkpoint of another layout
        can have buffers of the same sizes. One written before the layout was stored has none to check."""
        extra = state_dict.get(prefix + "_extra_state")  # torch's key of get_extra_state's value
        if extra is not None:
            self._check_checkpoint(extra)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _check_checkpoint(self, extra: dict) -> None:
        """Raise naming the first field where the checkpoint's optimizer or layout differs from this module's."""
        if extra.get("optimizer") != self.optimizer.kind:
            raise ValueError(f"checkpoint optimizer '{extra.get('optimizer')}' != module's '{self.optimizer.kind}'")
        if "layout" not in extra:
            return
        saved, mine = extra["layout"], self._layout_state()
        differ = "checkpoint of another table layout:"
        for t, (theirs, ours) in enumerate(zip(saved["tables"], mine["tables"])):
            for field, a, b in zip(("name", "rows", "dim", "pooling"), theirs, ours):
                if a != b:
                    raise ValueError(f"{differ} table {t} ('{ours[0]}'): {field} {a!r} in the checkpoint, {b!r} in "
                                     "the module")
        if len(saved["tables"]) != len(mine["tables"]):
            raise ValueError(f"{differ} {len(saved['tables'])} tables in the checkpoint, {len(mine['tables'])} in "
                             "the module")
        for field in ("feature_to_table", "weight_dtype"):
            if saved[field] != mine[field]:
                raise ValueError(f"{differ} {field} {saved[field]!r} in the checkpoint, {mine[field]!r} in the module")

    # ---- checks -------------------------------------------------------------------------------
    def _feature_label(self, f: int) -> str:
        t = self.feature_to_table[f]
        number = f if self.feature_numbers is None else self.feature_numbers[f]
        return f"feature {number} (table '{self.tables[t].name}', rows {self.tables[t].rows})"

    def _validate(self, batch: JaggedBatch) -> None:
        """A lookup's checks of ``batch``: ``check_batch``, then the flags of an earlier lookup."""
        self.check_batch(batch, full=self.debug_checks)
        self.check_errors(wait=False)

    def check_batch(self, batch: JaggedBatch, *, full: bool = False) -> None:
        """Raise ``JaggedBatchError`` where ``batch`` is not one of this module's: its feature count, then
        ``JaggedBatch.validate`` on the tables' device (``full``: the data too, naming feature and table)."""
        if batch.num_features != len(self.feature_to_table):
            raise JaggedBatchError(f"batch has {batch.num_features} features, module has "
                                   f"{len(self.feature_to_table)}")
        names = [self.tables[t].name for t in self.feature_to_table]
        batch.validate(rows=[self.tables[t].rows for t in self.feature_to_table], full=full,
                       table_names=names, device=self.weights.device)

    def check_errors(self, *, wait: bool = True) -> None:
        """Raise for bad ids / offsets seen by an earlier lookup (the kernels mask them and flag).

        On a GPU the flags of the last lookup are copied back without blocking; ``wait=False`` only
        looks when that copy has landed, ``wait=True`` synchronises.
        """
        if self._pending_flags is None:
            return
        host, event = self._pending_flags
        if not wait and event is not None and not event.query():
            return
        if event is not None:
            event.synchronize()
        self._pending_flags = None
        bad = [(f, int(v)) for f, v in enumerate(host.tolist()) if v]
        if bad:
            self.flags.zero_()
            lines = "; ".join(f"{self._feature_label(f)}: {_flag_text(v)}" for f, v in bad)
            raise JaggedBatchError(f"bad input in a recent batch (masked, not applied): {lines}. "
                                   "Construct with debug_checks=True to locate it before launch")

    def __getstate__(self) -> dict:
        """Pickling and ``copy.deepcopy``: a CUDA event cannot be copied, so the last lookup's flags are waited
        for and kept without one (a copy reports them at its next check, as the original would)."""
        state = self.__dict__.copy()
        if self._pending_flags is not None and self._pending_flags[1] is not None:
            host, event = self._pending_flags
            event.synchronize()
            state["_pending_flags"] = (host, None)
        return state

    def _record_flags(self) -> None:
        if self.flags.device.type == "cpu":
            self._pending_flags = (self.flags.clone(), None)
            if not self.defer_errors:
                self.check_errors()
            return
        host = torch.empty(self.flags.shape, dtype=self.flags.dtype, pin_memory=True)
        host.copy_(self.flags, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending_flags = (host, event)

    # ---- configs ------------------------------------------------------------------------------
    def _forward_config(self, batch: JaggedBatch, sequence: bool) -> tbe_select.ForwardConfig:
        """The tile of a launch over the pooled features' ids, or the sequence features' (``sequence``), priced
        at those features' bag lengths."""
        features = self.sequence_features if sequence else self.pooled_features
        mean_bag = batch.nnz / max(batch.batch_size * batch.num_features, 1)
        key = ("fwd", batch.batch_size, sequence, round(mean_bag, 1))
        if key not in self._configs:
            row_bytes = self.block_d * self.weights.element_size()
            self._configs[key] = tbe_select.select_forward(
                tbe_select.selection_spec(self.weights.device), batch_size=batch.batch_size,
                num_features=len(features), mean_bag=mean_bag, block_d=self.block_d, row_bytes=row_bytes,
                vec=self.vec, bag_lengths=self._bag_lengths(batch, features))
        return self._configs[key]

    def forward_plan(self, batch: JaggedBatch) -> list[tuple[ForwardLaunch, Tensor]]:
        """The pooled forward's launches for this batch shape (``tbe_forward_plan.plan_forward``), each with
        its features as a device tensor of feature ids; planned once per batch size and mean bag length,
        priced at this batch's loop iterations per program (``tbe_forward.loop_trips``: ragged bags)."""
        mean_bag = batch.nnz / max(batch.batch_size * batch.num_features, 1)
        key = ("plan", batch.batch_size, round(mean_bag, 1))
        if key not in self._configs:
            spec = tbe_select.selection_spec(self.weights.device)
            tiles = [(c.bags, c.hots) for c in tbe_select.forward_candidates(self.block_d, spec.warp_size)]
            launches = plan_forward(spec, batch_size=batch.batch_size,
                                    bag_lengths=self._bag_lengths(batch, self.pooled_features),
                                    block_d=self.block_d, row_bytes=self.block_d * self.weights.element_size(),
                                    vec=self.vec, table_rows=[self.tables[self.feature_to_table[f]].rows
                                                              for f in self.pooled_features],
                                    loop_trips=loop_trips(batch.offsets, batch.batch_size, self.pooled_features, tiles))
            self._configs[key] = [(launch, self._pooled_ids[list(launch.features)]) for launch in launches]
        return self._configs[key]

    def _bag_lengths(self, batch: JaggedBatch, features: list[int]) -> list[float]:
        """Mean bag length of each of ``features`` (reads F+1 offsets: synchronises, once per config key)."""
        marks = batch.offsets[:: max(batch.batch_size, 1)].tolist()
        size = max(batch.batch_size, 1)
        return [max(marks[f + 1] - marks[f], 0) / size for f in features]

    def _update_config(self, nnz: int, block: int | None = None) -> tbe_select.UpdateConfig:
        """The update config of the dim group of BLOCK_D ``block`` (default: the widest, ``block_d``)."""
        if self.update_config is not None:
            return self.update_config
        block = self.block_d if block is None else block
        key = ("upd", max(nnz, 1).bit_length(), self.host_bound, block)
        if key not in self._configs:
            self._configs[key] = tbe_select.select_update(
                tbe_select.selection_spec(self.weights.device), nnz=self._selection_nnz(nnz), one_dim=self.one_dim > 0,
                host_bound=self.host_bound, **self._update_shape(block))
        return self._configs[key]

    def _selection_nnz(self, nnz: int) -> int:
        """The ids the backward's choices (update config, dim groups) are priced at: the batch's own, or when
        deterministic the least of the power-of-two bucket the choices are kept under. Priced at the first batch of
        its bucket, a choice depended on the batches the module had seen: a module resumed from a checkpoint could
        tile a batch otherwise than the one that ran on, and sum its duplicates in another order (the TBE fuzz's seed
        20067: tiles of 32 against 64, rows one fp32 ulp apart)."""
        return 1 << (max(nnz, 1).bit_length() - 1) if self.deterministic else nnz

    def _update_shape(self, block: int) -> dict:
        """What the update's selection and cost depend on at BLOCK_D ``block``, besides nnz."""
        return dict(block_d=block, row_bytes=block * self.weights.element_size(),
                    state_tiles=STATE_PER_ELEMENT[self.optimizer.kind],
                    rounding=ROUNDED_ROWS.get(self.weight_dtype, ""), grad_bytes=self.output_dtype.itemsize)

    def key_plan(self, nnz: int) -> KeyPlan:
        """How the backward of a batch of ``nnz`` ids keys and launches its update (``KeyPlan``): one launch
        per dim group where the tables' dims take several BLOCK_D and ``group_dims`` says so (None: where
        ``tbe_select.groups_pay`` for this batch), else one at the widest BLOCK_D."""
        lay = self.layout
        single = KeyPlan(blocks=(self.block_d,), key_base=lay.table_row_base, invalid_key=self.total_rows)
        grouped = KeyPlan(blocks=tuple(self.dim_blocks), key_base=lay.table_key_base,
                          invalid_key=len(self.dim_blocks) * self.total_rows)
        if not grouped.grouped or self.group_dims is False:
            return single
        if self.group_dims:
            return grouped
        key = ("groups", max(nnz, 1).bit_length(), self.host_bound)
        if key not in self._configs:
            self._configs[key] = tbe_select.groups_pay(
                tbe_select.selection_spec(self.weights.device), nnz=self._selection_nnz(nnz),
                groups=len(self.dim_blocks), total_rows=self.total_rows, host_bound=self.host_bound,
                **self._update_shape(self.block_d))
        return grouped if self._configs[key] else single

    def plan_configs(self, plan: KeyPlan, nnz: int) -> list[tbe_select.UpdateConfig]:
        """The update config of each of ``plan``'s launches."""
        return [self._update_config(nnz, b) for b in plan.blocks]


def _flag_text(code: int) -> str:
    """What a feature's flags (``tbe_forward``'s FLAG_* bits) report."""
    texts = ((FLAG_BAD_ID, "an id out of range or negative"),
             (FLAG_BAD_OFFSETS, "offsets that decrease or lie outside [0, nnz]"),
             (FLAG_BAD_ENDS, "ids outside every bag (offsets[0] != 0 or offsets[-1] < nnz)"))
    return " and ".join(text for bit, text in texts if code & bit)


def packed_views(flat: Tensor, shapes: list[tuple[int, int]], per_row: bool = False) -> list[Tensor]:
    """Each table's view of a flat buffer packed as ``TableBatchedEmbedding`` packs its weights and state:
    the tables of ``shapes`` ((rows, dim) each) in order, back to back, [rows, dim] each; ``per_row``: one
    value per row ([rows] each, row-wise state). Also how a checkpoint's buffers are cut without a module."""
    out, start = [], 0
    for rows, dim in shapes:
        size = rows if per_row else rows * dim
        piece = flat[start:start + size]
        out.append(piece if per_row else piece.view(rows, dim))
        start += size
    return out


def feature_columns(tables: list[TableSpec], feature_to_table: list[int],
                    placed: tuple[list[int], int] | None) -> tuple[list[int], int]:
    """Where each feature's pooled dim starts in an output row (-1: pooling "none", not in the output) and the
    row's width: the pooled features one after another, or where ``placed`` (columns, width) puts them, checked:
    inside the row, overlapping no other feature."""
    dims = [tables[t].dim for t in feature_to_table]
    if placed is None:
        cols, col = [], 0
        for t, dim in zip(feature_to_table, dims):
            cols.append(-1 if tables[t].pooling == "none" else col)
            col += 0 if tables[t].pooling == "none" else dim
        return cols, col
    cols, width = [as_int(c, "output_columns") for c in placed[0]], as_int(placed[1], "output width")
    if len(cols) != len(dims):
        raise ValueError(f"output_columns: {len(cols)} columns for {len(dims)} features")
    for f, (t, col, dim) in enumerate(zip(feature_to_table, cols, dims)):
        if tables[t].pooling == "none":
            raise ValueError(f"output_columns: feature {f} (table '{tables[t].name}') has pooling 'none': it has "
                             "no columns in the pooled output")
        if col < 0 or col + dim > width:
            raise ValueError(f"output_columns: feature {f} would fill columns {col}..{col + dim - 1} of a "
                             f"{width}-column output")
    spans = sorted(zip(cols, dims, range(len(cols))))
    for (col, dim, f), (nxt, _, g) in zip(spans, spans[1:]):
        if nxt < col + dim:
            raise ValueError(f"output_columns: features {f} and {g} overlap (columns {col} and {nxt}, dim {dim})")
    return cols, width


def as_int(value, what: str) -> int:
    """``value`` as a plain Python int (numpy and 0-d tensor integers included: the checkpoint's layout holds
    plain ints, which ``torch.load(weights_only=True)`` reads); TypeError naming ``what`` for a bool, a float
    or anything else."""
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError):
            return operator.index(value)
    raise TypeError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")


def _check_unique_names(tables: list[TableSpec]) -> None:
    """Error messages and checkpoints name tables: two of one name would make both ambiguous (TorchRec's
    collections refuse them too)."""
    names = [t.name for t in tables]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"table name '{name}' is used by {names.count(name)} tables; table names must be unique")


def _cumsum(xs: list[int]) -> list[int]:
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out
