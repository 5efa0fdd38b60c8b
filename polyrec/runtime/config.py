"""The trainer's configuration and how its "auto" choices resolve on the present machine."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from polyrec.kernels.interpreter import interpreting
from polyrec.models import default_backends
from polyrec.runtime.dist import DEFAULT_TIMEOUT_S
from polyrec.runtime.graphs import check_choice


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """One training run. "auto" fields resolve by device: see :func:`resolve`."""

    preset: str = "dcnv2-small"  # model preset (polyrec.models.PRESETS)
    data: str = "synthetic"  # synthetic[:zipf|uniform] | criteo:PATH[,PATH..] | mlperf:PATH | movielens:PATH
    eval_data: str | None = None  # held-out data of the same kind (criteo/mlperf); synthetic/movielens have their own
    steps: int = 1000  # total optimizer steps (a resumed run continues up to this number)
    batch_size: int = 512
    seed: int = 0  # model init, synthetic data, MovieLens split and shuffles
    device: str = "auto"  # "auto" (cuda when present), "cpu" or "cuda[:N]"
    # dense matmul dtype: "auto" (bf16 on GPU, fp32 on CPU), "bf16", "fp32", or "fp8" (GEMMs in fp8 with
    # delayed scaling, activations bf16; polyrec dense backend; polyrec.kernels.fp8_dense)
    precision: str = "auto"
    embedding_backend: str = "auto"  # "auto", "torch" or "polyrec" (polyrec.models.default_backends)
    dense_backend: str = "auto"  # "auto", "torch" or "polyrec"
    dense_optimizer: str = "adagrad"  # "adagrad" (MLPerf) or "adam"
    lr: float = 0.005  # dense learning rate (MLPerf DLRM-DCNv2 reference: --adagrad --learning_rate 0.005)
    embedding_optimizer: str = "rowwise_adagrad"  # sgd | rowwise_adagrad (MLPerf, FBGEMM) | adagrad | adam
    embedding_lr: float | None = None  # None: same as lr
    # embedding rows: fp32, or fp16 / bf16 (stochastic rounding; polyrec backend); or one per table, comma-separated
    # (a plan's per-table precisions: polyrec.models.mixed_embeddings, one process)
    embedding_dtype: str = "fp32"
    row_cap: int | None = None  # cut every table to at most this many rows (benchmarks on small memory)
    eval_every: int = 0  # steps between evaluations; 0: only at the end
    eval_batches: int = 8  # most batches per eval (Criteo/MLPerf: fewer if the file ends); MovieLens: its test split
    log_every: int = 50  # steps between metric lines (and NaN checks: one device sync each)
    checkpoint_dir: Path | None = None  # a str is taken too (as are metrics_path's and plan's): see expand_paths
    checkpoint_every: int = 0  # steps between checkpoints; 0: only at the end and on SIGTERM / Ctrl-C
    resume: bool = False  # continue from checkpoint_dir/checkpoint.pt
    skip_bad_rows: bool = False  # count and skip malformed input rows instead of stopping at the first
    # criteo and mlperf files: read the next training batch on a background thread while the step runs
    # (polyrec.data.prefetch; the same batches, checkpoints and bad-row counts as without)
    prefetch: bool = True
    pipeline: str = "sync"  # "sync", or "semi-sync": lookups one update stale, overlapped on a side stream
    overlap_streams: bool = True  # semi-sync on a GPU: False keeps its order on one stream (for checking)
    cuda_graphs: bool | str = "auto"  # CUDA-graph the dense forward+backward: True, False, or "auto" (runtime.graphs)
    # before the first step, compile its Triton kernels in parallel from a dry run (runtime.cold_start); on a GPU
    # with polyrec's embedding tables, one process, the sync pipeline
    precompile: bool = True
    # > 0: synthetic training batches repeat with this period (no generation cost; a model memorises a pool
    # of 4 full-size batches within ~15 steps: benchmarks/results/half_rows_probe_2026-12-02)
    synthetic_pool: int = 0
    cpu_threads: int = 0  # torch intra-op threads on the CPU; 0 keeps torch's default (one per core)
    metrics_path: Path | None = None  # JSON-lines log; default checkpoint_dir/metrics.jsonl when there is one
    plan: Path | None = None  # `polyrec plan` JSON whose choices the run takes (polyrec.runtime.plan_apply)
    collective_timeout_s: float = DEFAULT_TIMEOUT_S  # seconds a collective waits for the slowest rank (torchrun)

    def as_dict(self) -> dict[str, Any]:
        """Plain values only (checkpoints are loaded with weights_only=True)."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}

    def rank_shared(self) -> dict[str, Any]:
        """The fields every rank of one job must agree on (``RANK_LOCAL_FIELDS`` may differ per host;
        the data is compared by kind, as each host may mount its files elsewhere)."""
        shared = {k: v for k, v in self.as_dict().items() if k not in RANK_LOCAL_FIELDS}
        shared["data_kind"] = self.data.split(":", 1)[0]
        shared["eval_data_kind"] = self.eval_data.split(":", 1)[0] if self.eval_data else None
        return shared


#: TrainConfig fields that may differ between the ranks of one job: the device (torchrun assigns it),
#: host threads, file locations (the plan's content is compared by the trainer) and the side-stream
#: switch, which a sync run does not use.
RANK_LOCAL_FIELDS = frozenset({"device", "cpu_threads", "metrics_path", "data", "eval_data", "plan",
                               "overlap_streams"})


@dataclass(kw_only=True, slots=True)
class Resolved:
    """What "auto" became on this machine."""

    device: torch.device
    compute_dtype: torch.dtype
    dense_fp8: bool  # the dense GEMMs in fp8 (precision "fp8"; compute_dtype is then bf16)
    embedding_backend: str
    dense_backend: str
    row_dtypes: tuple[torch.dtype, ...]  # embedding_dtype's: one for every table, or one per table


#: ``TrainConfig.precision`` values.
PRECISIONS = ("auto", "bf16", "fp32", "fp8")
#: The dense optimizers the trainer runs (MLPerf's Adagrad, and Adam).
DENSE_OPTIMIZERS = ("adagrad", "adam")
#: ``TrainConfig.embedding_dtype`` names -> row dtypes (polyrec.kernels.tbe.WEIGHT_DTYPES).
EMBEDDING_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _device(name: str) -> torch.device:
    """``auto`` (cuda when present), ``cpu`` or ``cuda[:N]``; an error names any other."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {name!r}") from exc
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but torch sees no CUDA/ROCm GPU")
    return device


#: TrainConfig's path fields and the options that set them (``expand_paths``).
PATH_OPTIONS = {"checkpoint_dir": "--checkpoint-dir", "metrics_path": "--metrics", "plan": "--plan"}


def expand_paths(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with its path fields as Paths, ``~`` expanded (the shell leaves it in ``--checkpoint-dir=~/x``); an
    empty one is refused naming its option: ``Path("")`` is the working directory (typer passes "" on as ".")."""
    paths = {}
    for name, option in PATH_OPTIONS.items():
        value = getattr(cfg, name)
        if value is not None and not str(value).strip():
            raise ValueError(f"{option} is empty: give a path, or leave the option out")
        if value is not None:
            paths[name] = Path(value).expanduser()
    return dataclasses.replace(cfg, **paths)


#: Seeds are within a signed 64-bit integer: torch.manual_seed takes -2**63 to 2**64 - 1 ("Overflow when unpacking
#: long long" above), and each rank adds ``parallel.RANK_SEED_STRIDE`` times its rank to the run's seed.
SEED_LIMIT = 2**63


def check_counts(cfg: TrainConfig) -> None:
    """Counts and intervals in range; errors name the option (also before the row cap shapes the model)."""
    for name, least in (("steps", 1), ("batch_size", 1), ("log_every", 1), ("eval_batches", 1), ("eval_every", 0),
                        ("checkpoint_every", 0), ("cpu_threads", 0), ("synthetic_pool", 0)):
        if getattr(cfg, name) < least:
            needs = "at least 1" if least else "0 or more"
            raise ValueError(f"--{name.replace('_', '-')} must be {needs}, got {getattr(cfg, name)}")
    if cfg.row_cap is not None and cfg.row_cap < 1:
        raise ValueError(f"--row-cap must be at least 1 (or left out), got {cfg.row_cap}")
    if not -SEED_LIMIT <= cfg.seed < SEED_LIMIT:
        raise ValueError(f"--seed must be an integer from -2**63 to 2**63 - 1, got {cfg.seed}")


#: The longest --collective-timeout, seconds (146 years): C++ deadlines (gloo's, NCCL's watchdog) are int64
#: nanoseconds of a steady clock, and half their range keeps "now + timeout" from overflowing.
COLLECTIVE_TIMEOUT_LIMIT_S = 2**62 * 1e-9


def check_collective_timeout(cfg: TrainConfig) -> None:
    """A collective timeout the process group can take; the error names the option (NaN is refused too)."""
    if not 0 < cfg.collective_timeout_s <= COLLECTIVE_TIMEOUT_LIMIT_S:
        raise ValueError(f"--collective-timeout must be a number of seconds above 0 (at most "
                         f"{COLLECTIVE_TIMEOUT_LIMIT_S:.3g}), got {cfg.collective_timeout_s}")


def check_rates(cfg: TrainConfig) -> None:
    """Learning rates a run can use; errors name the option (inf or NaN would train to NaN, a negative rate
    climbs the loss, and an embedding_lr of 0 would be read as "same as lr")."""
    if not math.isfinite(cfg.lr) or cfg.lr < 0:
        raise ValueError(f"--lr must be a finite number, 0 or more, got {cfg.lr}")
    if cfg.embedding_lr is not None and (not math.isfinite(cfg.embedding_lr) or cfg.embedding_lr <= 0):
        raise ValueError(f"--embedding-lr must be a finite number above 0 (leave it out to use --lr), "
                         f"got {cfg.embedding_lr}")


def resolve(cfg: TrainConfig) -> Resolved:
    """Resolve the "auto" fields; errors name the field."""
    device = _device(cfg.device)
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}")
    bf16 = cfg.precision in ("bf16", "fp8") or (cfg.precision == "auto" and device.type == "cuda")
    emb_default, dense_default = default_backends(device)
    check_choice(cfg.cuda_graphs)
    if cfg.cuda_graphs is True and device.type != "cuda":
        raise ValueError("--cuda-graphs needs a CUDA/ROCm GPU")
    if cfg.pipeline not in ("sync", "semi-sync"):
        raise ValueError(f"pipeline must be sync or semi-sync, got {cfg.pipeline!r}")
    if cfg.dense_optimizer not in DENSE_OPTIMIZERS:
        raise ValueError(f"dense optimizer must be {' or '.join(DENSE_OPTIMIZERS)}, got {cfg.dense_optimizer!r}")
    check_counts(cfg)
    check_rates(cfg)
    if cfg.resume and cfg.checkpoint_dir is None:
        raise ValueError("--resume needs --checkpoint-dir")
    if cfg.checkpoint_every and cfg.checkpoint_dir is None:
        raise ValueError("--checkpoint-every needs --checkpoint-dir")
    if cfg.metrics_path is not None and Path(cfg.metrics_path).is_dir():
        raise ValueError(f"--metrics {cfg.metrics_path} is a directory; give a file name (e.g. "
                         f"{Path(cfg.metrics_path) / 'metrics.jsonl'})")
    embedding_backend = emb_default if cfg.embedding_backend == "auto" else cfg.embedding_backend
    if embedding_backend == "polyrec" and device.type == "cpu" and not interpreting():  # else Triton's "0 active drivers"
        raise ValueError("--embedding-backend polyrec on the CPU runs its Triton kernels in Triton's interpreter: "
                         "set TRITON_INTERPRET=1 (on one process, --embedding-backend torch needs no Triton)")
    row_dtypes = row_dtype_names(cfg.embedding_dtype)
    if set(row_dtypes) != {"fp32"} and embedding_backend != "polyrec":
        origin = f" (from the plan {cfg.plan})" if cfg.plan is not None else ""
        raise ValueError(f"--embedding-dtype {cfg.embedding_dtype}{origin} needs --embedding-backend polyrec "
                         f"(torch's EmbeddingBag path keeps fp32 rows)")
    dense_backend = dense_default if cfg.dense_backend == "auto" else cfg.dense_backend
    if cfg.precision == "fp8" and dense_backend != "polyrec":
        raise ValueError(f"--precision fp8 needs --dense-backend polyrec (got {dense_backend}; on the CPU the "
                         "polyrec dense backend runs its kernels in Triton's interpreter: TRITON_INTERPRET=1)")
    return Resolved(device=device, compute_dtype=torch.bfloat16 if bf16 else torch.float32,
                    dense_fp8=cfg.precision == "fp8", embedding_backend=embedding_backend, dense_backend=dense_backend,
                    row_dtypes=tuple(EMBEDDING_DTYPES[name] for name in row_dtypes))


def split_row_dtypes(spec: str) -> tuple[str, ...]:
    """``TrainConfig.embedding_dtype`` as its names, unchecked: one, or one per table (comma-separated)."""
    return tuple(name.strip() for name in spec.split(","))


def row_dtype_spec(names: Sequence[str]) -> str:
    """Row dtype names as ``TrainConfig.embedding_dtype`` holds them: one name where every table has it, else the
    names comma-separated."""
    return names[0] if len(set(names)) == 1 else ",".join(names)


def row_dtype_names(spec: str) -> tuple[str, ...]:
    """``TrainConfig.embedding_dtype``'s names: one, or one per table (comma-separated); an unknown or empty
    one is refused, naming its place."""
    names = split_row_dtypes(spec)
    for i, name in enumerate(names):
        if name not in EMBEDDING_DTYPES:
            where = f" (table {i} of {len(names)})" if len(names) > 1 else ""
            raise ValueError(f"embedding dtype must be one of {', '.join(EMBEDDING_DTYPES)}, or one of them per "
                             f"table, comma-separated; got {name!r}{where}")
    return names


def table_row_dtypes(rt: Resolved, num_tables: int) -> torch.dtype | tuple[torch.dtype, ...]:
    """The row dtype of every table (one), or of each (several: one per table, checked against the model's
    ``num_tables``)."""
    if len(rt.row_dtypes) == 1:
        return rt.row_dtypes[0]
    if len(rt.row_dtypes) != num_tables:
        raise ValueError(f"--embedding-dtype names {len(rt.row_dtypes)} row dtypes; the model has {num_tables} "
                         "tables: give one for all, or one per table")
    return rt.row_dtypes
