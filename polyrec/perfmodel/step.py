"""Time of one whole training step from the time of its parts (pure; seconds).

A synchronous data-parallel DLRM step on each rank runs, in order: the input all-to-all (ids and
lengths to the ranks that own each table), the embedding forward, the pooled-output all-to-all, the
dense forward and backward, the gradient all-to-all, the embedding backward with its fused optimizer
update, the dense all-reduce and the dense optimizer. The collectives synchronise the ranks, so each
compute phase costs its slowest rank. The CPU issues the kernels asynchronously and, with no
synchronisation inside a step, runs ahead of the GPU: in steady state a step takes the longer of the
GPU's time and the CPU's time to issue it (small models in eager mode take the CPU's).
Overlap:

- ``none``: everything in sequence;
- ``ddp``: DDP all-reduces gradient buckets while the dense backward runs; only the last bucket
  (PyTorch DDP's ``bucket_cap_mb`` = 25 MiB by default) and whatever exceeds the backward are exposed;
- ``pipeline``: additionally the embedding all-to-alls run under the previous / next step's dense
  compute (TorchRec's TrainPipelineSparseDist), exposed only where they exceed it.

With ``ddp`` (polyrec's runtime), the input all-to-all of a batch crosses during the previous
step's dense work, on its own stream and communicator (polyrec.runtime.trainer
``_send_inputs_ahead``), so it hides up to what of that work the all-reduce has not hidden under (as
under ``pipeline``: the two share the link), and no collective stands between a
rank's embedding backward and its next lookup: the embedding phases cost the slowest rank's
forward + backward, not the slowest forward plus the slowest backward. Each rank's embedding backward also sorts its ids while
the pooled rows cross the forward all-to-all (polyrec.runtime.sharding calls the TBE's
``prepare_backward`` between starting that exchange and waiting for it): a rank's sort is hidden up
to the exchange's time. The embedding gradient's all-to-all (A) hides one of two things, per rank:

- with a cross network (DLRM-DCNv2), the exchange starts inside the dense backward, as soon as the
  network's input gradient is final (polyrec.kernels.dcn ``on_input_grad``, before layer 0's two
  weight-gradient GEMMs; the trainer's ``_early_gradient_exchange``). From that moment the compute
  stream runs the gradient gather g, then the rest of the dense backward T (``gradient_tail_s``);
  NCCL (one stream) runs A from the end of g, then DDP's last bucket L once A is done and the
  backward has made that bucket (its first layers' gradients); the compute waits for L, steps the
  dense optimizer O, and the exchange is over: g + max(T, A) + L + O, where it used to be
  g + T + L + max(A, O). T is hidden up to A, and O no longer hides;
- without one (the dot interaction), the exchange starts after the dense backward and the dense
  optimizer steps while it crosses (the trainer's ``backward_overlapping``): O hidden up to A.

NCCL's kernels also slow the compute kernels they run beside (they take SMs and memory bandwidth):
while an exchange runs, the compute beside it progresses at ``1 - c`` of its speed (``Contention``:
``c`` for compute-bound and for memory-bound work), so an exchange of ``A`` beside ``W`` of work takes
``max(A, W + c A)`` together and hides ``A + W - max(A, W + c A)`` (``beside``), not ``min(A, W)``;
every overlap of a collective with compute above is priced this way. (Under ``pipeline`` the
exchanges themselves hide under dense compute.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: PyTorch DDP's default gradient bucket size, bytes (torch.nn.parallel.DistributedDataParallel,
#: ``bucket_cap_mb=25``).
DDP_BUCKET_BYTES = 25 * 2**20
OVERLAP_MODES: tuple[str, ...] = ("none", "ddp", "pipeline")


@dataclass(frozen=True, kw_only=True, slots=True)
class Contention:
    """Fraction of the compute stream's throughput a collective takes while it runs beside it."""

    compute_bound: float = 0.0  # GEMMs (the dense backward)
    memory_bound: float = 0.0  # copies, sorts, optimizer steps


#: NCCL on 2 H200s over NVLink (NVLS off), from one world-2 timeline against the world-1 one at the same
#: commit (74b6996; benchmarks/results/multi_gpu_world{1,2}_profile_profile_nvidia-h200_2026-11-30): the
#: weight-gradient GEMMs beside the gradient all-to-all ran 0.52-0.58 ms against 0.28-0.30 alone (1.9x:
#: 0.47 of their throughput taken), the id sort's radix passes beside the pooled all-to-all 0.75 ms against
#: 0.57 (1.32x: 0.24). Measured on that one machine; assumed for RCCL and other links (estimate).
NCCL_CONTENTION = Contention(compute_bound=0.47, memory_bound=0.24)


def together(comm_s: float, work_s: float, contention: float) -> float:
    """Seconds a collective of ``comm_s`` and ``work_s`` of compute beside it take together, the compute
    running at ``1 - contention`` of its speed while the collective does: ``max(comm, work)`` without."""
    return max(comm_s, work_s + contention * comm_s)


def beside(comm_s: float, work_s: float, contention: float) -> float:
    """Seconds a collective of ``comm_s`` hides under ``work_s`` of compute beside it (``together``):
    ``min(comm, work)`` without contention."""
    return comm_s + work_s - together(comm_s, work_s, contention)


@dataclass(kw_only=True, slots=True)
class StepParts:
    """Per-rank compute times and fleet-wide collective times of one step, seconds."""

    embedding_fwd_s: list[float]  # per rank
    embedding_bwd_s: list[float]  # per rank, fused optimizer update included
    dense_fwd_s: list[float]  # per rank
    dense_bwd_s: list[float]  # per rank
    dense_optimizer_s: list[float]  # per rank
    other_s: list[float]  # per rank: elementwise glue, loss, launch gaps
    input_all_to_all_s: float = 0.0  # ids + lengths
    output_all_to_all_s: float = 0.0  # pooled embeddings forward
    grad_all_to_all_s: float = 0.0  # their gradients backward
    all_reduce_s: float = 0.0  # dense gradients
    all_reduce_bytes: float = 0.0  # size of the dense gradients (for the DDP last-bucket term)
    overlap: str = "ddp"  # one of OVERLAP_MODES
    host_s: list[float] | None = None  # per rank: CPU time to issue the step's kernels (eager dispatch)
    graphed_host_s: list[float] | None = None  # per rank: the same with the dense half CUDA-graphed
    embedding_sort_s: list[float] | None = None  # per rank: of embedding_bwd_s, the id sort (runs early)
    # per rank: of dense_bwd_s, what runs after the embedding gradient is final and its all-to-all has
    # started (a cross network on several ranks); None: the exchange starts after the dense backward
    gradient_tail_s: list[float] | None = None
    contention: Contention = field(default_factory=Contention)  # what a collective takes from compute beside it


@dataclass(kw_only=True, slots=True)
class StepTime:
    """The step's predicted time by term (seconds); ``total_s`` = sum of terms - ``overlap_s``."""

    embedding_fwd_s: float
    embedding_bwd_s: float
    dense_fwd_s: float
    dense_bwd_s: float
    all_to_all_s: float
    all_reduce_s: float
    optimizer_s: float
    other_s: float
    overlap_s: float
    host_excess_s: float  # CPU dispatch time beyond the GPU time (small models are launch bound)
    total_s: float
    host_s: float = 0.0  # CPU time to issue the step (slowest rank)
    graphed_host_s: float = 0.0  # the same with the dense half CUDA-graphed (not in total_s)
    # the eager / graphed step is host-bound with its embedding updates selected by device time: they
    # then select weighing their launches' host issue, and host_s / graphed_host_s count those launches
    host_bound: bool = False
    graphed_host_bound: bool = False


def exposed_all_reduce(all_reduce_s: float, all_reduce_bytes: float, dense_bwd_s: float,
                       contention: float = 0.0) -> float:
    """All-reduce time DDP cannot hide under the dense backward: the last bucket always, and of the
    rest what the backward beside it leaves (``beside``: where it outlasts the backward, and what its
    ``contention`` costs the backward)."""
    if all_reduce_s <= 0:
        return 0.0
    last = all_reduce_s * min(1.0, DDP_BUCKET_BYTES / max(all_reduce_bytes, 1.0))
    return all_reduce_s - beside(all_reduce_s - last, dense_bwd_s, contention)


def _gradient_exchange_overlap(parts: StepParts, opt: float) -> float:
    """What the gradient all-to-all hides (``ddp``, see the module docstring): the dense backward's
    tail where the exchange starts inside it, judged per rank (its tail and optimizer against the
    slowest rank's, which the step's terms add up), else the dense optimizer."""
    a2a, c = parts.grad_all_to_all_s, parts.contention
    if not parts.gradient_tail_s:
        return beside(a2a, opt, c.memory_bound)
    ranks = zip(parts.gradient_tail_s, parts.dense_optimizer_s, strict=True)
    return max(parts.gradient_tail_s) + a2a + opt - max(together(a2a, t, c.compute_bound) + o for t, o in ranks)


def _embedding_chain(parts: StepParts) -> float:
    """``ddp``: the embedding time on the step's critical path, the slowest rank's backward then next
    forward (no collective between them), less its id sort where the pooled exchange hides it."""
    sort = parts.embedding_sort_s or [0.0] * len(parts.embedding_bwd_s)
    hidden = (beside(parts.output_all_to_all_s, s, parts.contention.memory_bound) for s in sort)
    return max(f + b - h for f, b, h in zip(parts.embedding_fwd_s, parts.embedding_bwd_s, hidden, strict=True))


def step_time(parts: StepParts) -> StepTime:
    """Combine the parts into the step time (see the module docstring for the overlap rules)."""
    if parts.overlap not in OVERLAP_MODES:
        raise ValueError(f"overlap must be one of {OVERLAP_MODES}, got {parts.overlap!r}")
    emb_f, emb_b = max(parts.embedding_fwd_s), max(parts.embedding_bwd_s)
    dense_f, dense_b = max(parts.dense_fwd_s), max(parts.dense_bwd_s)
    opt, other = max(parts.dense_optimizer_s), max(parts.other_s)
    a2a = parts.input_all_to_all_s + parts.output_all_to_all_s + parts.grad_all_to_all_s
    overlap, c = 0.0, parts.contention.compute_bound
    if parts.overlap in ("ddp", "pipeline"):
        overlap += parts.all_reduce_s - exposed_all_reduce(parts.all_reduce_s, parts.all_reduce_bytes, dense_b, c)
    room = max(0.0, dense_f + dense_b - overlap)  # the dense compute the all-reduce has not hidden under
    if parts.overlap == "pipeline":
        overlap += beside(a2a, room, c)
    elif parts.overlap == "ddp":
        overlap += _gradient_exchange_overlap(parts, opt)
        overlap += beside(parts.input_all_to_all_s, room, c)
        overlap += emb_f + emb_b - _embedding_chain(parts)
    device = emb_f + emb_b + dense_f + dense_b + a2a + parts.all_reduce_s + opt + other - overlap
    host = max(parts.host_s or [0.0])
    excess = max(0.0, host - device)
    return StepTime(embedding_fwd_s=emb_f, embedding_bwd_s=emb_b, dense_fwd_s=dense_f, dense_bwd_s=dense_b,
                    all_to_all_s=a2a, all_reduce_s=parts.all_reduce_s, optimizer_s=opt, other_s=other,
                    overlap_s=overlap, host_excess_s=excess, total_s=device + excess, host_s=host,
                    graphed_host_s=max(parts.graphed_host_s or [0.0]))
