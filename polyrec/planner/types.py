"""The planner's small interfaces: what it plans for (ModelSpec, Fleet) and what it answers (Plan).

A ModelSpec is built from a model config of ``polyrec.models`` by :func:`model_spec_from_config` (the
planner layer sits above ``models/`` and reads the config's fields, it does not import it). A Fleet is
parsed from ``KINDxCOUNT[,KINDxCOUNT][@HOSTS]``: devices per host, and hosts. A Plan says, per table,
where it lives and in which precision, plus the batch, kernel configs and the predicted step time and
memory; it is JSON (``Plan.to_json`` / ``Plan.from_json``, see ``planner/serialize.py``).
Units: bytes, seconds (``*_ms`` fields in milliseconds), samples per second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from polyrec.hardware.catalog import UnknownDeviceError, catalog, get_device, same_name
from polyrec.hardware.detect import CPU_NAME
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.tbe_reads import SKEWS

#: Version of the plan JSON format; ``from_json`` refuses any other.
PLAN_VERSION = 1
#: Embedding weight precisions and their bytes per value.
WEIGHT_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}
#: Embedding optimizers, named as in ``polyrec.kernels.tbe_optim.OPTIMIZERS`` and ``polyrec.models``.
OPTIMIZERS: tuple[str, ...] = ("sgd", "rowwise_adagrad", "adagrad", "adam")
#: How a table is split over GPUs (TorchRec's names): whole table on one GPU, rows split, columns split.
SHARDINGS: tuple[str, ...] = ("table_wise", "row_wise", "column_wise")
#: Where a shard's rows live: device memory, or host memory behind an HBM cache of ``cache_rows`` rows.
MEMORY_KINDS: tuple[str, ...] = ("hbm", "host_cached")
#: Index distributions the cost model knows (``polyrec.perfmodel.tbe_reads.SKEWS``): uniform over rows, the
#: log-uniform skew of the TBE benchmark (rank = floor((rows+1)^u) - 1, u uniform: P(rank < k) =
#: ln(k+1) / ln(rows+1)), or the trainer's synthetic "zipf" ids (a power law of exponent 1.05).
INDEX_DISTRIBUTIONS: tuple[str, ...] = SKEWS
#: How much of the step the runtime overlaps: nothing, DDP's all-reduce under the dense backward, or
#: also the embedding all-to-alls under the dense compute (a pipelined trainer).
OVERLAP_MODES: tuple[str, ...] = ("none", "ddp", "pipeline")
#: Dense matmul input dtypes and their bytes per value.
#: "fp8": fp8 GEMMs where the sizes allow beside bf16 activations (``--precision fp8``): 2 bytes a value.
DENSE_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp8": 2}
#: The dense dtypes ``polyrec train`` runs (its ``--precision``: ``polyrec.runtime.config.PRECISIONS`` less "auto"),
#: the only ones ``polyrec plan`` plans: the cost model prices fp16 and tf32 too, but the trainer has no fp16 loss
#: scaling nor a TF32 setting (its fp32 matmuls are IEEE), and ``polyrec train --plan`` refuses such a plan.
TRAINABLE_DENSE_DTYPES: tuple[str, ...] = ("bf16", "fp32", "fp8")
#: Dense optimizers and their fp32 values of state per parameter: Adagrad's sum of squares, Adam's two
#: moments (torch.optim.Adagrad / Adam).
DENSE_STATE_PER_PARAM: dict[str, int] = {"sgd": 0, "adagrad": 1, "adam": 2}
#: Feature interactions of the DLRM family (``polyrec.models.ModelConfig.interaction``).
INTERACTIONS: tuple[str, ...] = ("dot", "dcnv2")
#: Most GPUs in a fleet the planner plans for: it prices every rank, and 4096 ranks take ~80 s to plan
#: MLPerf DLRM-DCNv2 on the 2-core dev CPU (measured, 512 take 4 s); a fleet string of a typo's size
#: (H200x99999999999) would otherwise fill the memory with its ranks.
MAX_WORLD_SIZE = 4096


def is_count(value: Any) -> bool:
    """Whether ``value`` is an integer >= 1 (a bool is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def first_repeat(values: Sequence[Any]) -> Any | None:
    """The first of ``values`` that an earlier one equals; None where each is listed once."""
    return next((v for i, v in enumerate(values) if v in values[:i]), None)


class FleetError(ValueError):
    """A fleet string that does not parse (the message shows the syntax), or a Fleet field out of range."""


class ConstraintError(ValueError):
    """A PlanConstraints field out of range. The message names the field (``constraint batch_per_gpu must be an
    integer >= 1, got 0``); ``field`` and ``problem`` (what is wrong, naming neither) let a caller that took the value
    under another name say it with that name (``polyrec plan --batch-per-gpu 0: must be an integer >= 1``)."""

    def __init__(self, message: str, *, field: str, problem: str) -> None:
        super().__init__(message)
        self.field = field
        self.problem = problem


@dataclass(frozen=True, kw_only=True, slots=True)
class TableSpec:
    """One embedding table as the planner sees it."""

    name: str  # unique within the model
    rows: int  # hash size
    dim: int  # embedding dimension D
    pooling: float  # mean lookups per sample (multi-hot size; 1 = one-hot)

    def __post_init__(self) -> None:
        for name in ("rows", "dim"):
            if not is_count(getattr(self, name)):
                raise ValueError(f"table {self.name!r}: {name} must be a positive integer, got {getattr(self, name)!r}")
        p = self.pooling
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p <= 0:
            raise ValueError(f"table {self.name!r}: pooling must be a finite number of lookups per sample above 0, "
                             f"got {p!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class DenseSpec:
    """The dense half of a DLRM-family model (same fields as ``polyrec.models.ModelConfig``)."""

    num_dense: int  # dense input features per sample
    bottom_mlp: tuple[int, ...]  # bottom MLP output widths; the last equals the embedding dim
    top_mlp: tuple[int, ...]  # top MLP output widths; the last is 1
    interaction: str  # "dot" or "dcnv2"
    dcn_layers: int = 0  # cross layers (dcnv2)
    dcn_rank: int = 0  # low rank of each cross layer (dcnv2)

    def __post_init__(self) -> None:
        """The checks of ``polyrec.models.ModelConfig.validate`` on the dense half."""
        if self.interaction not in INTERACTIONS:
            raise ValueError(f"interaction must be 'dot' or 'dcnv2', got {self.interaction!r}")
        if not is_count(self.num_dense):
            raise ValueError(f"num_dense must be a positive integer, got {self.num_dense!r}")
        for name in ("bottom_mlp", "top_mlp"):
            if not all(is_count(w) for w in getattr(self, name)):
                raise ValueError(f"{name} widths must be positive integers, got {getattr(self, name)!r}")
        if not self.top_mlp or self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp must end in 1 (the logit), got {self.top_mlp!r}")
        if self.interaction == "dcnv2" and not (is_count(self.dcn_layers) and is_count(self.dcn_rank)):
            raise ValueError(f"dcnv2 needs dcn_layers >= 1 and dcn_rank >= 1, got {self.dcn_layers!r} and "
                             f"{self.dcn_rank!r}")
        if self.interaction == "dot" and (self.dcn_layers or self.dcn_rank):
            raise ValueError(f"dcn_layers and dcn_rank are for dcnv2 only, got dcn_layers={self.dcn_layers}, "
                             f"dcn_rank={self.dcn_rank} with interaction 'dot'")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Tables plus dense architecture: everything the cost model needs about a model."""

    name: str
    tables: tuple[TableSpec, ...]
    dense: DenseSpec
    index_distribution: str = "uniform"  # one of INDEX_DISTRIBUTIONS

    def __post_init__(self) -> None:
        """Tables the planner can price: at least one, named once each, of the one embedding dim the bottom
        MLP ends in (the interaction takes them side by side, as ``polyrec.models.ModelConfig``)."""
        if not self.tables:
            raise ValueError(f"model {self.name!r} needs at least one table (one per categorical feature)")
        twice = first_repeat([t.name for t in self.tables])
        if twice is not None:
            raise ValueError(f"model {self.name!r}: table {twice!r} is listed twice")
        dims = sorted({t.dim for t in self.tables})
        if len(dims) > 1:
            raise ValueError(f"model {self.name!r}: tables have dims {', '.join(map(str, dims))}; the planner's "
                             f"models take one embedding dim")
        if tuple(self.dense.bottom_mlp[-1:]) != (dims[0],):
            raise ValueError(f"model {self.name!r}: bottom_mlp must end in the embedding dim {dims[0]}, "
                             f"got {self.dense.bottom_mlp!r}")
        if self.index_distribution not in INDEX_DISTRIBUTIONS:
            raise ValueError(f"model {self.name!r}: index_distribution must be one of "
                             f"{', '.join(INDEX_DISTRIBUTIONS)}, got {self.index_distribution!r}")

    @property
    def embedding_dim(self) -> int:
        return self.tables[0].dim

    @property
    def interaction_dim(self) -> int:
        """Width of the top MLP's input (as ``ModelConfig.interaction_dim``)."""
        f = len(self.tables) + 1
        if self.dense.interaction == "dot":
            return self.embedding_dim + f * (f - 1) // 2
        return f * self.embedding_dim

    @property
    def total_rows(self) -> int:
        return sum(t.rows for t in self.tables)

    def table(self, name: str) -> TableSpec:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"model {self.name!r} has no table {name!r}")


def model_spec_from_config(config: Any, *, index_distribution: str = "uniform") -> ModelSpec:
    """The ModelSpec of a ``polyrec.models.ModelConfig`` (tables named t0, t1, ... as the models do)."""
    tables = tuple(TableSpec(name=f"t{i}", rows=int(rows), dim=int(config.embedding_dim), pooling=float(hot))
                   for i, (rows, hot) in enumerate(zip(config.table_rows, config.multi_hot, strict=True)))
    dense = DenseSpec(num_dense=config.num_dense, bottom_mlp=tuple(config.bottom_mlp), top_mlp=tuple(config.top_mlp),
                      interaction=config.interaction, dcn_layers=config.dcn_layers, dcn_rank=config.dcn_rank)
    return ModelSpec(name=config.name, tables=tables, dense=dense, index_distribution=index_distribution)


def model_config_fields(spec: ModelSpec) -> dict[str, Any]:
    """Keyword arguments that rebuild the ``polyrec.models.ModelConfig`` of a spec (e.g. a co-designed one)."""
    dims = {t.dim for t in spec.tables}
    if len(dims) != 1:
        raise ValueError(f"model {spec.name!r}: ModelConfig needs one embedding dim, tables have {sorted(dims)}")
    return {"name": spec.name, "num_dense": spec.dense.num_dense, "table_rows": tuple(t.rows for t in spec.tables),
            "embedding_dim": dims.pop(), "multi_hot": tuple(max(1, round(t.pooling)) for t in spec.tables),
            "bottom_mlp": spec.dense.bottom_mlp, "top_mlp": spec.dense.top_mlp,
            "interaction": spec.dense.interaction, "dcn_layers": spec.dense.dcn_layers,
            "dcn_rank": spec.dense.dcn_rank}


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceGroup:
    """``count`` devices of one kind on every host."""

    device: str  # catalog name, e.g. "H200"
    count: int  # devices of this kind per host

    def __post_init__(self) -> None:
        try:
            get_device(self.device)
        except UnknownDeviceError as unknown:
            raise FleetError(str(unknown)) from None
        if not is_count(self.count):
            raise FleetError(f"{self.device}: count must be a positive integer (devices per host), got {self.count!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Fleet:
    """Identical hosts, each with the same device groups; ranks are numbered host by host."""

    groups: tuple[DeviceGroup, ...]
    hosts: int = 1
    # memory of each host, bytes, that the rows and state of host-cached tables may take (a DGX H200 has
    # 2 TB); None: not known, the planner takes the upper bound ``memory.HOST_MEMORY_BYTES``
    host_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        h = self.host_memory_bytes
        if h is not None and not is_count(h):
            raise FleetError(f"Fleet.host_memory_bytes must be a positive integer (bytes of memory per host) "
                             f"or None (not known), got {h!r}")
        if not self.groups:
            raise FleetError("a fleet needs at least one device group")
        if not is_count(self.hosts):
            raise FleetError(f"Fleet.hosts must be a positive integer, got {self.hosts!r}")
        specs = [get_device(g.device) for g in self.groups]
        twice = first_repeat([spec.name for spec in specs])
        if twice is not None:
            raise FleetError(f"fleet {self.text}: {twice} is listed twice")
        vendors = sorted({spec.vendor for spec in specs})
        if len(vendors) > 1:  # one job's collectives run on NCCL or on RCCL, not across both
            raise FleetError(f"fleet {self.text} mixes {' and '.join(vendors)} GPUs; one training job runs on one "
                             "vendor's (NCCL or RCCL): plan each kind apart, or compare them with --compare")
        if self.world_size > MAX_WORLD_SIZE:
            raise FleetError(f"fleet {self.text} has {self.world_size:,} GPUs; the planner plans fleets of up to "
                             f"{MAX_WORLD_SIZE:,} GPUs")

    @property
    def per_host(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def world_size(self) -> int:
        return self.per_host * self.hosts

    @property
    def text(self) -> str:
        body = ",".join(f"{g.device}x{g.count}" for g in self.groups)
        return body + (f"@{self.hosts}" if self.hosts > 1 else "")

    def rank_devices(self) -> list[str]:
        """Device name of every rank, in rank order."""
        one_host = [g.device for g in self.groups for _ in range(g.count)]
        return one_host * self.hosts

    def specs(self) -> dict[str, DeviceSpec]:
        return {g.device: get_device(g.device) for g in self.groups}

    def host_of(self, rank: int) -> int:
        return rank // self.per_host


#: A fleet entry, KIND x COUNT. ``\d`` takes the decimal digits of every script, as ``int()`` does (``H200x８``
#: full-width, ``H200x٣`` Arabic-Indic), so that ``_ascii_count`` refuses such a count by name rather than as an
#: unknown device.
_FLEET_ITEM = re.compile(r"^\s*([A-Za-z0-9_.-]+?)\s*[xX\*]\s*(-?\d+)\s*$")
FLEET_SYNTAX = "KINDxCOUNT[,KINDxCOUNT][@HOSTS], e.g. H200x8, MI300Xx8@4 or H100x4,H200x4"


#: What users put between a device kind and its count in place of the fleet's 'x' (``H200:8``, ``H100 8``,
#: ``MI300X/8``, ``B200=8``, ``H200#8``, ``H200_8``, ``H200-8``).
_OTHER_SEPARATOR = re.compile(r"^[\s:=/#_-]+(\d+)$")
#: A count glued to a kind ending in 'x' (``MI300X8``, read as 8 of 'MI300'). Only those: ``H2008`` may be a device
#: of its own name as much as 8 H200s.
_GLUED = re.compile(r"^(\d+)$")


def _meant_entry(entry: str, devices: Sequence[str]) -> str | None:
    """The fleet entry meant where a count follows a device kind with no 'x' before it: glued to a kind ending in
    'x' (``MI300X8``: ``MI300Xx8``) or after another separator (``H200:8``: ``H200x8``), or None."""
    for device in devices:
        rest = entry[len(device):]
        count = _OTHER_SEPARATOR.match(rest) or (_GLUED.match(rest) if device[-1] in "xX" else None)
        if (count and entry[:len(device)].lower() == device.lower() and count.group(1).isascii()
                and int(count.group(1)) >= 1):
            return f"{device}x{int(count.group(1))}"
    return None


def _ascii_count(text: str, entry: str, count: str) -> None:
    """A count of fleet ``text`` (in ``entry``) in other digits than ASCII's is refused: ``int()`` and
    ``str.isdecimal`` take every script's, so ``H200x８`` planned 8 H200s without a word. (What is no number at all,
    such as '²', the caller refuses as such.)"""
    if not count.isascii() and count.lstrip("-").isdecimal():
        raise FleetError(f"fleet {text!r}: {entry!r} has a count in other digits than ASCII ({count!r}); counts are "
                         f"ASCII digits (0-9); syntax {FLEET_SYNTAX}")


def _unknown_hint(name: str, entry: str, valid: Sequence[str]) -> str:
    """What comes between an unknown device of a fleet ``entry`` and the list of valid ones: the entry meant where a
    count follows the kind with no 'x' before it (``_meant_entry``), or what ``cpu`` (``polyrec hw detect``'s name of
    the host) is."""
    meant = _meant_entry(entry.strip(), valid)
    if meant:
        return f"; did you mean {meant} (KINDxCOUNT)? Valid devices: "
    if same_name(name, [CPU_NAME]) is not None:
        return (f"; {CPU_NAME} is the host CPU (polyrec train --device cpu runs there), which the planner does not "
                "plan: it plans the catalog's GPUs. Valid devices: ")
    return "; valid devices: "


def parse_fleet(text: str) -> Fleet:
    """Parse ``KINDxCOUNT[,KINDxCOUNT][@HOSTS]`` (a bare ``KIND`` means one device)."""
    body, at, hosts_text = text.strip().partition("@")
    hosts = 1
    if at:
        _ascii_count(text, f"@{hosts_text}", hosts_text.strip())
        if not hosts_text.strip().isdecimal() or int(hosts_text) < 1:  # isdigit() takes '²', which int() refuses
            raise FleetError(f"fleet {text!r}: hosts after '@' must be a positive integer; syntax {FLEET_SYNTAX}")
        hosts = int(hosts_text)
    groups: list[DeviceGroup] = []
    valid = sorted(catalog())
    for item in body.split(","):
        whole = same_name(item, valid) is not None  # a whole device name is that device, in any case (get_device)
        match = None if whole else _FLEET_ITEM.match(item)
        if match:
            _ascii_count(text, item.strip(), match.group(2))
        name, count = (match.group(1), int(match.group(2))) if match else (item.strip(), 1)
        if not name:
            raise FleetError(f"fleet {text!r}: empty device entry; syntax {FLEET_SYNTAX}")
        try:
            spec = get_device(name)
        except UnknownDeviceError:
            raise FleetError(f"fleet {text!r}: unknown device {name!r}{_unknown_hint(name, item, valid)}"
                             f"{', '.join(valid)}") from None
        if count < 1:
            raise FleetError(f"fleet {text!r}: count of {name} must be a positive integer (>= 1), got {count}")
        groups.append(DeviceGroup(device=spec.name, count=count))
    return Fleet(groups=tuple(groups), hosts=hosts)


@dataclass(kw_only=True, slots=True)
class PlanConstraints:
    """What the user allows the planner to choose from (first entry = preferred)."""

    weight_dtypes: tuple[str, ...] = ("fp32", "fp16")  # demoted in this order only where needed to fit
    optimizers: tuple[str, ...] = ("rowwise_adagrad",)  # embedding optimizer state, same preference order
    shardings: tuple[str, ...] = SHARDINGS
    allow_host_cache: bool = True  # host memory with an HBM cache, where HBM is not enough
    batch_per_gpu: int | None = None  # fixed batch per GPU, or None to choose
    max_batch_per_gpu: int = 65536  # largest batch per GPU the planner may choose (convergence bound)
    dense_dtype: str = "bf16"  # matmul inputs of the dense layers (fp32 master weights)
    dense_optimizer: str = "adagrad"  # MLPerf DLRM-DCNv2 uses Adagrad for the dense layers too
    overlap: str = "ddp"  # one of OVERLAP_MODES: what the runtime overlaps

    def __post_init__(self) -> None:
        checks = (("weight_dtypes", self.weight_dtypes, tuple(WEIGHT_BYTES)), ("optimizers", self.optimizers, OPTIMIZERS),
                  ("shardings", self.shardings, SHARDINGS))
        for name, values, valid in checks:
            if isinstance(values, str) or not isinstance(values, Sequence):
                problem = f"must be a sequence of names, e.g. ({valid[0]!r},)"
                raise ConstraintError(f"constraint {name} {problem}, got {values!r}", field=name, problem=problem)
            bad = [v for v in values if v not in valid]
            if not values or bad:
                problem = f"{bad or 'empty'} not allowed; valid: {', '.join(valid)}"
                raise ConstraintError(f"constraint {name}: {problem}", field=name, problem=problem)
            twice = first_repeat(values)
            if twice is not None:  # an order of preference names each once (a repeat made the notes claim demotions)
                problem = f"{twice} listed more than once"
                raise ConstraintError(f"constraint {name}: {problem}", field=name, problem=problem)
        for name, value, valid in (("overlap", self.overlap, OVERLAP_MODES),
                                   ("dense_dtype", self.dense_dtype, tuple(DENSE_DTYPE_BYTES)),
                                   ("dense_optimizer", self.dense_optimizer, tuple(DENSE_STATE_PER_PARAM))):
            if value not in valid:
                raise ConstraintError(f"constraint {name}: {value!r}; valid: {', '.join(valid)}", field=name,
                                      problem=f"not one of {', '.join(valid)}")
        for name in ("batch_per_gpu", "max_batch_per_gpu"):
            value = getattr(self, name)
            if value is not None and not is_count(value):
                problem = "must be an integer >= 1"
                raise ConstraintError(f"constraint {name} {problem}, got {value!r}", field=name, problem=problem)


@dataclass(kw_only=True, slots=True)
class TablePlan:
    """Where one table lives and how it is stored, with its predicted cost."""

    table: str  # TableSpec.name
    sharding: str  # one of SHARDINGS
    ranks: tuple[int, ...]  # ranks holding its shards (one for table_wise)
    memory: str = "hbm"  # one of MEMORY_KINDS
    cache_rows: int = 0  # rows of the HBM cache per shard (host_cached only)
    weight_dtype: str = "fp32"  # one of WEIGHT_BYTES
    optimizer: str = "rowwise_adagrad"  # one of OPTIMIZERS
    fwd_ms: float = 0.0  # predicted forward time of its slowest shard
    bwd_ms: float = 0.0  # predicted backward + fused update time of its slowest shard


@dataclass(kw_only=True, slots=True)
class StepBreakdown:
    """Predicted time of one training step (ms), by term; ``total_ms`` = sum of terms - overlap + host excess."""

    embedding_fwd_ms: float  # slowest rank's embedding lookups
    embedding_bwd_ms: float  # slowest rank's embedding backward with the fused optimizer update
    dense_fwd_ms: float  # bottom MLP, interaction, top MLP, loss
    dense_bwd_ms: float  # their backward (dgrad + wgrad)
    all_to_all_ms: float  # embedding input, pooled output and gradient exchanges
    all_reduce_ms: float  # dense gradient all-reduce
    optimizer_ms: float  # dense optimizer
    other_ms: float  # launch gaps and small elementwise work
    overlap_ms: float  # time hidden by overlapping communication with compute (subtracted)
    total_ms: float
    host_excess_ms: float = 0.0  # CPU kernel-issue time beyond the GPU time (added)
    host_ms: float = 0.0  # CPU time to issue the whole step (launches x host cost + fixed part)
    graphed_host_ms: float = 0.0  # the same with the dense half CUDA-graphed (polyrec train's default where host-bound)
    # host-bound with the embedding updates selected by device time, eager / graphed: the trainer's
    # updates then weigh their launches' host issue, and host_ms / graphed_host_ms count that selection
    host_bound: bool = False
    graphed_host_bound: bool = False


@dataclass(kw_only=True, slots=True)
class DeviceMemory:
    """Predicted bytes on one rank."""

    rank: int
    device: str
    weights: int  # embedding shards (or their HBM caches) + dense parameters
    optimizer_state: int  # embedding optimizer state in HBM + dense optimizer state and gradients
    activations: int  # tensors saved for backward and the embedding inputs/outputs
    workspace: int  # transient buffers: TBE backward sort/segment, largest gradient, BLAS workspace
    reserve: int  # context and allocator margin kept free
    capacity: int  # the device's HBM bytes
    host_bytes: int = 0  # host memory used by host-cached tables of this rank

    @property
    def used(self) -> int:
        """Bytes the allocator holds at the peak (what max_memory_allocated reports)."""
        return self.weights + self.optimizer_state + self.activations + self.workspace

    @property
    def fits(self) -> bool:
        return self.used + self.reserve <= self.capacity


@dataclass(kw_only=True, slots=True)
class Plan:
    """The planner's answer: a complete, JSON-serialisable training plan."""

    version: int = PLAN_VERSION
    model: ModelSpec
    fleet: Fleet
    batch_per_gpu: int
    dense_dtype: str = "bf16"
    dense_optimizer: str = "adagrad"
    overlap: str = "ddp"
    tables: tuple[TablePlan, ...]
    kernels: dict[str, str] = field(default_factory=dict)  # op -> selected kernel config label
    step: StepBreakdown
    memory: tuple[DeviceMemory, ...]
    samples_per_s: float
    origins: dict[str, str] = field(default_factory=dict)  # "<device>.<ceiling>" -> datasheet / calibrated / estimate
    notes: tuple[str, ...] = ()

    @property
    def global_batch(self) -> int:
        return self.batch_per_gpu * self.fleet.world_size

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory)

    def table_plan(self, name: str) -> TablePlan:
        for t in self.tables:
            if t.table == name:
                return t
        raise KeyError(f"plan has no table {name!r}")

    def to_json(self, *, indent: int | None = 1) -> str:
        from polyrec.planner.serialize import plan_to_json

        return plan_to_json(self, indent=indent)

    @staticmethod
    def from_json(text: str) -> Plan:
        from polyrec.planner.serialize import plan_from_json

        return plan_from_json(text)
