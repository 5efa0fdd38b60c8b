"""What the trainer does differently on several ranks: sharded embeddings, DDP for the dense half,
per-rank data streams, global losses, and sharded checkpoints.

Launch: ``torchrun --nproc-per-node N -m polyrec train ...`` (multi-host: torchrun's rendezvous
flags). Each rank trains on its own ``batch_size`` samples; the global batch is ``N * batch_size``.
The embedding tables are sharded by the plan (``--plan plan.json``, from ``polyrec plan``) or, without
one, table-wise with bytes balanced over the ranks. Dense gradients are averaged by DDP (bucketed
all-reduce overlapped with the backward) and the embedding all-to-all scales its gradient by
1/N, so N ranks take the steps one process would take on the global batch.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from polyrec.data import BadRows
from polyrec.kernels.tbe import EmbeddingOptimizer
from polyrec.models import ModelConfig
from polyrec.runtime.dist import DistContext, second_group
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings, default_shardings
from polyrec.runtime.peer_exchange import copy_engine_exchange
from polyrec.runtime.sharded_checkpoint import full_tables, load_sharded, save_sharded
from polyrec.runtime.shards import TableSharding

if TYPE_CHECKING:
    from polyrec.planner.types import Plan

#: Offset between the data seeds of consecutive ranks. Not a multiple of the synthetic source's batch stride
#: (7919, ``SyntheticSource._generator``): with 7919 here, rank r's batch i was rank 0's batch i + 1,000,003 r.
#: With this prime, two ranks' (train or eval) streams of up to 1024 ranks meet after 3.6e12 batches at the
#: soonest (the generator seeds are linear in the seed and the batch index, modulo 2^63 - 1).
RANK_SEED_STRIDE = 1_000_000_007
#: Plan sharding names (TorchRec's, used by polyrec.planner) -> polyrec.runtime.shards kinds.
PLAN_KINDS = {"table_wise": "table", "row_wise": "row", "column_wise": "column"}
#: Sub-directory of a checkpoint that holds the embedding shards.
SHARDS_DIR = "embedding_shards"


def rank_seed(seed: int, ctx: DistContext) -> int:
    """The data seed of this rank: each rank reads its own stream."""
    return seed + RANK_SEED_STRIDE * ctx.rank


def shardings_from_plan(plan: Plan) -> list[TableSharding]:
    """The per-table shardings of a plan (checked against the run by ``plan_apply.check_plan``)."""
    return [TableSharding(kind=PLAN_KINDS[plan.table_plan(t.name).sharding], ranks=plan.table_plan(t.name).ranks)
            for t in plan.model.tables]


def sharded_embeddings(config: ModelConfig, optimizer: Any, ctx: DistContext, *, seed: int,
                       weight_dtype: torch.dtype | tuple[torch.dtype, ...], output_dtype: torch.dtype,
                       plan: Plan | None) -> DistributedEmbeddings:
    """This rank's part of the model's tables, with the fused TBE optimizer on each shard; ``weight_dtype``: one
    row dtype, or one per table."""
    shardings = (shardings_from_plan(plan) if plan is not None
                 else default_shardings(config.table_rows, config.embedding_dim, ctx.world_size,
                                        lookups=config.multi_hot))
    opt = EmbeddingOptimizer(kind=optimizer.kind, lr=optimizer.lr, eps=optimizer.eps, beta1=optimizer.beta1,
                             beta2=optimizer.beta2, weight_decay=optimizer.weight_decay,
                             initial_accumulator_value=optimizer.initial_accumulator_value)
    return DistributedEmbeddings(config.table_rows, config.embedding_dim, optimizer=opt, shardings=shardings,
                                 rank=ctx.rank, world_size=ctx.world_size, device=ctx.device, seed=seed,
                                 weight_dtype=weight_dtype, output_dtype=output_dtype, input_group=second_group(ctx),
                                 peer_exchange=copy_engine_exchange(dist.group.WORLD, ctx.device, ctx.timeout_s))


#: DDP's gradients are views of its all-reduce buckets: no copy of every gradient into its bucket
#: before the all-reduce and back after (the MLPerf dense half's ~100 MB of fp32 gradients each way).
GRADIENT_AS_BUCKET_VIEW = True


def data_parallel(module: nn.Module, ctx: DistContext, *,
                  on_last_bucket: Callable[[], None] | None = None) -> nn.Module:
    """DDP around the dense half (gradients averaged over ranks, all-reduce overlapped with backward).
    ``on_last_bucket``: called each backward when the last bucket's gradients are queued, on the
    stream that made them, before that bucket's all-reduce (the trainer: the tables' update on its
    own stream waits for the dense backward there)."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    ddp = DistributedDataParallel(module, device_ids=ids, gradient_as_bucket_view=GRADIENT_AS_BUCKET_VIEW)
    if on_last_bucket is not None:
        ddp.register_comm_hook(None, _all_reduce_noting_last(on_last_bucket))
    return ddp


def _all_reduce_noting_last(on_last: Callable[[], None]) -> Callable:
    """A DDP comm hook: DDP's mean over ranks (torch's ``default_hooks.allreduce_hook``: the bucket
    divided by the number of ranks, then summed over them), ``on_last`` first when the bucket is the
    backward's last. (DDP checks the hook's annotations against its own types, so it has none.)"""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def hook(group, bucket):
        if bucket.is_last():
            on_last()
        return default_hooks.allreduce_hook(group, bucket)
    return hook


def global_mean(values: torch.Tensor) -> torch.Tensor:
    """The mean over ranks of a tensor (every rank gets it): losses every rank agrees on."""
    total = values.detach().float().clone()
    dist.all_reduce(total)
    return total / dist.get_world_size()


def all_ranks_true(flag: bool, device: torch.device) -> bool:
    """True only if ``flag`` is true on every rank (so all ranks take the same branch)."""
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def check_job(cfg: Any, embedding_backend: str, plan: Plan | None) -> None:
    """What a torchrun job cannot combine (``cfg``: its TrainConfig), named before anything is built; then that
    every rank was started with the same options and plan (``check_same_config``)."""
    if embedding_backend != "polyrec":
        raise ValueError("training on several ranks shards the tables with polyrec's TBE: use "
                         "--embedding-backend polyrec (or auto on a GPU)")
    if cfg.pipeline != "sync" or cfg.cuda_graphs is True:
        raise ValueError("training on several ranks supports --pipeline sync without --cuda-graphs")
    digest = hashlib.sha256(plan.to_json().encode()).hexdigest()[:12] if plan is not None else None
    check_same_config({**cfg.rank_shared(), "plan (content digest)": digest})


def check_same_config(fields: dict[str, Any]) -> None:
    """Every rank runs one job: a field that differs between ranks (a batch size, a step count, a
    learning rate) would desynchronise the collectives or train different dense halves. One
    all-gather at start; every rank raises the same error, naming the field and each rank's value."""
    seen = gather(fields)
    for name in fields:
        values = [ranks_fields[name] for ranks_fields in seen]
        if any(v != values[0] for v in values[1:]):
            per_rank = ", ".join(f"rank {rank}: {value!r}" for rank, value in enumerate(values))
            raise ValueError(f"{name} differs between ranks ({per_rank}): every rank must be started "
                             "with the same options")


class StopVote:
    """Whether any rank was signalled to stop (SIGTERM, SIGINT), agreed by every rank. A signal reaches each rank
    at its own moment (torchrun forwards it to one worker after another; `kill` or a scheduler may
    signal one worker alone): a rank that stopped on its own went into its checkpoint's collectives
    while its peers started the next step's, and the job hung until the collective timeout. Each step
    every rank starts a non-blocking all-reduce (MAX) of its signal number on a gloo group (host
    memory: no device sync, nothing queued among the device's collectives) and reads the one it
    started the step before: every rank reads the same value after the same step, one step after the
    signal was seen. The trainer votes ``train_loop.DATA_STOP``, above every signal number, for a rank whose
    training data failed."""

    def __init__(self, timeout_s: float) -> None:
        self.group = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=timeout_s))  # every rank, same point
        self._sent: tuple[torch.Tensor, Any] | None = None

    def agreed(self, signum: int | None) -> int | None:
        """Send this rank's ``signum`` (None: not signalled); return the largest any rank sent at the
        previous call (None: none had been signalled, or this is the first call)."""
        flag = torch.tensor([signum or 0], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        previous, self._sent = self._sent, (flag, work)
        if previous is None:
            return None
        previous[1].wait()
        return int(previous[0]) or None

    def settle(self, signum: int | None) -> int | None:
        """Agree on ``signum`` now (a blocking vote, for after a save or an evaluation, which can take
        minutes): the largest signal any rank sent at the previous call or this one; the next ``agreed``
        starts afresh."""
        previous = self.agreed(signum)
        (flag, work), self._sent = self._sent, None
        work.wait()
        return max(previous or 0, int(flag[0])) or None

    def drain(self) -> None:
        """Wait for the last vote (every rank started it) before the group goes."""
        if self._sent is not None:
            self._sent[1].wait()
            self._sent = None


def all_bad_rows(bad: Any) -> tuple[int, list[str]]:
    """The training rows every rank skipped (``BadRows`` of each rank's stream): their count and the
    first examples, rank 0's first (collective). Rank 0 alone reports, and its own count left out the
    rows of the other ranks' blocks."""
    seen = gather((bad.count, list(bad.examples)))
    examples = [example for _, some in seen for example in some]
    return sum(count for count, _ in seen), examples[:bad.MAX_EXAMPLES]


def data_position(saved: list[dict], rank: int, world_size: int, batch_size: int) -> dict | None:
    """This rank's data position from a checkpoint's, one per rank of the job that saved it (``data_by_rank``;
    a one-process checkpoint's one); None: start the stream anew. Under the same number of ranks each rank
    continues its own. Under another, files dealt in blocks of ``batch_size`` (Criteo TSV, MLPerf: block k to
    rank k mod the world size) continue from the furthest any old rank had read, so the new ranks read the
    blocks after it, each once, and rank 0 carries the skipped bad rows' count (the others none). Before, each
    rank took its old namesake's position: a new rank read the files from their start again (rows trained on
    already) and a job of fewer ranks read the last old rank's blocks once more. Other sources (synthetic,
    MovieLens) are a stream per rank: a rank the old job did not have starts its own anew."""
    if len(saved) == world_size:
        return saved[rank]
    if all("stream_line" in s for s in saved):  # Criteo TSV: positions in the run's stream of lines
        return _with_bad_rows(max(saved, key=lambda s: s["stream_line"]), saved, rank)
    if all("read" in s and "records" in s for s in saved):  # MLPerf: records read of the rank's own blocks
        end = max(_dealt_end(int(s["read"]), old, len(saved), batch_size) for old, s in enumerate(saved))
        return _with_bad_rows(saved[0] | {"read": _dealt_before(end, rank, world_size, batch_size)}, saved, rank)
    return saved[rank] if rank < len(saved) else None


def _with_bad_rows(position: dict, saved: list[dict], rank: int) -> dict:
    """``position`` with every old rank's bad-row count on rank 0 and none on the others (the count a run
    reports is the sum over its ranks); as it is where a checkpoint has no count."""
    if not all("bad_rows" in s for s in saved):
        return position
    examples = [e for s in saved for e in s["bad_rows"]["examples"]][:BadRows.MAX_EXAMPLES]
    counted = {"count": sum(int(s["bad_rows"]["count"]) for s in saved), "examples": examples}
    return position | {"bad_rows": counted if rank == 0 else {"count": 0, "examples": []}}


def _dealt_end(read: int, rank: int, world_size: int, block: int) -> int:
    """The stream index after the last of ``read`` records of ``rank``'s blocks (0: none read)."""
    if read == 0:
        return 0
    k, offset = divmod(read - 1, block)
    return (k * world_size + rank) * block + offset + 1


def _dealt_before(end: int, rank: int, world_size: int, block: int) -> int:
    """The records of ``rank``'s blocks before stream index ``end``."""
    blocks, offset = divmod(end, block)
    whole = max(0, -(-(blocks - rank) // world_size))  # its blocks k < blocks: k = rank, rank + world_size, ...
    return whole * block + (offset if blocks % world_size == rank else 0)


def barrier() -> None:
    dist.barrier()


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def save_shards(directory: Path, embeddings: DistributedEmbeddings, step: int) -> dict[str, str]:
    """Write every rank's shards to a new directory of their own step (collective); returns the pointer
    the main checkpoint stores. Earlier shard directories stay until the main checkpoint that points
    to the new one is in place (``drop_old_shards``), so a crash in between loses nothing."""
    name = _new_shards_dir(Path(directory), step)
    sharded = embeddings.sharded
    save_sharded(Path(directory) / name, sharded.local_shards, sharded.local, rank=sharded.rank,
                 world_size=sharded.world, step=step)
    return {"sharded": name}


def _new_shards_dir(directory: Path, step: int) -> str:
    """The name of a shard directory no earlier save wrote, chosen by rank 0 for every rank (collective).
    A save never rewrites a directory the main checkpoint may point to: saved again at its step (a run
    resumed under another sharding, stopped before its first step), the old files were replaced one
    rank at a time, and a crash in between left no loadable checkpoint."""
    name = [None]
    if dist.get_rank() == 0:
        name[0], again = f"{SHARDS_DIR}-step{step}", 0
        while (directory / name[0]).exists():
            again += 1
            name[0] = f"{SHARDS_DIR}-step{step}-{again}"
    dist.broadcast_object_list(name, src=0)
    return name[0]


def drop_old_shards(directory: Path, keep: str) -> None:
    """Remove shard directories other than ``keep`` (rank 0, after the main checkpoint is written)."""
    for old in Path(directory).glob(f"{SHARDS_DIR}-step*"):
        if old.name != keep:
            shutil.rmtree(old)


def load_shards(directory: Path, embeddings: nn.Module, pointer: dict[str, str]) -> None:
    """Fill the tables from sharded checkpoint files of any number of ranks (resharding as needed):
    this rank's shards of a DistributedEmbeddings, or every table of a single-process polyrec one."""
    path = Path(directory) / pointer["sharded"]
    if isinstance(embeddings, DistributedEmbeddings):
        load_sharded(path, embeddings.sharded.local_shards, embeddings.sharded.local)
    elif hasattr(embeddings, "tbe") or hasattr(embeddings, "tbes"):
        tables = getattr(embeddings, "tbe", embeddings)  # one TBE, or one per row dtype (MixedRowEmbeddings)
        load_sharded(path, full_tables(tables), tables)
    else:
        raise ValueError(f"{path} holds sharded polyrec tables; resume with the polyrec embedding backend")
