"""Bytes on each device: embedding shards and their optimizer state, dense parameters, activations,
workspace and the reserve the planner keeps free.

Embedding optimizer state is fp32, per row (rowwise Adagrad) or per element (Adagrad: 1, Adam: 2),
as ``polyrec.kernels.tbe_optim`` stores it. Anchor (DESIGN.md): MLPerf DLRM-DCNv2's 204,184,588 rows
x 128 in fp32 are 104.5 GB of weights; rowwise Adagrad adds 0.8 GB, full Adagrad 104.5 GB more.
"""

from __future__ import annotations

import math

from polyrec.planner.dense import dense_params
from polyrec.planner.ops import activation_peak_per_sample, dense_inventory
from polyrec.planner.types import DENSE_DTYPE_BYTES, DENSE_STATE_PER_PARAM, WEIGHT_BYTES, Fleet, ModelSpec

#: fp32 values of optimizer state per embedding row and per element (polyrec.kernels.tbe_optim
#: STATE_PER_ROW / STATE_PER_ELEMENT; the planner keeps its own copy so it imports no Triton).
STATE_PER_ROW: dict[str, int] = {"sgd": 0, "rowwise_adagrad": 1, "adagrad": 0, "adam": 0}
STATE_PER_ELEMENT: dict[str, int] = {"sgd": 0, "rowwise_adagrad": 0, "adagrad": 1, "adam": 2}
#: Bytes of an index (int64 values and offsets, the jagged layout of polyrec.kernels.jagged).
INDEX_BYTES = 8
#: Bytes per lookup the TBE backward allocates besides its per-tile partials
#: (polyrec.kernels.tbe_fused_backward ``_fused_backward``, lane update): sort keys and source positions (int32);
#: torch.sort's sorted keys, int64 permutation, int64 iota input and radix double buffer (int32 keys +
#: int64 values); the permute's int32 gradient offsets. Keys are int64 past 2^31 rows (+16).
TBE_BYTES_PER_LOOKUP = 4 + 4 + (4 + 8) + 8 + (4 + 8) + 4
TBE_WIDE_KEY_EXTRA = 16
#: Of those, the bytes per lookup ``prepare_backward`` keeps from the forward to the backward: source
#: positions and sorted keys (int32), the int64 permutation, the int32 gradient offsets.
PREPARED_BYTES_PER_LOOKUP = 4 + 4 + 8 + 4
#: Without it (one rank), what the trained pooled forward writes for the backward and keeps until it:
#: sort keys and source positions (int32).
FORWARD_KEYS_BYTES_PER_LOOKUP = 4 + 4
#: Most host memory one host holds, bytes, for the rows and state of host-cached tables: two sockets (the
#: 8-GPU servers of every device in the catalog are two-socket hosts, e.g. NVIDIA DGX H200: 2 x Xeon 8480C)
#: x 6 TiB, the most one AMD EPYC 9004 / 9005 socket takes (12 DDR5 channels x 2 DIMMs x 256 GiB: AMD EPYC
#: 9004 / 9005 series product specifications, "up to 6 TB per socket"). An upper bound, not what a host has
#: installed (a DGX H200 ships with 2 TB): the device catalog has no host memory figure, so where the fleet
#: does not give its hosts' (``Fleet.host_memory_bytes``) the planner refuses only what no such host can
#: hold, and a plan's notes give the host memory it needs.
HOST_MEMORY_BYTES = 2 * 6 * 2**40
#: Bytes per row of HBM-cache metadata (row id int64 + last-use step int64), as FBGEMM's LRU/LFU
#: cache keeps ``lxu_cache_state`` and ``lxu_state`` per cache slot (estimate).
CACHE_META_BYTES_PER_ROW = 16
#: BLAS workspace: PyTorch gives cuBLAS a 32 MiB workspace on Hopper-class GPUs
#: (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize) plus cuBLASLt's; 64 MiB for both (estimate).
BLAS_WORKSPACE_BYTES = 64 << 20
#: Device memory outside the allocator: CUDA / HIP context, kernels and library handles (estimate:
#: ~0.5-1 GB for a torch process on current GPUs as nvidia-smi / rocm-smi show it).
CONTEXT_BYTES = 1_000_000_000
#: Fraction of HBM kept free for caching-allocator fragmentation (estimate; planner_accuracy checks it).
ALLOCATOR_MARGIN = 0.03


def host_memory_limit(fleet: Fleet) -> int:
    """Bytes of each host's memory that host-cached tables may take: the fleet's figure where it gives one,
    else the upper bound ``HOST_MEMORY_BYTES``."""
    return HOST_MEMORY_BYTES if fleet.host_memory_bytes is None else fleet.host_memory_bytes


def weight_bytes(rows: int, dim: int, weight_dtype: str) -> int:
    return rows * dim * WEIGHT_BYTES[weight_dtype]


def state_bytes(rows: int, dim: int, optimizer: str) -> int:
    """fp32 optimizer state of an embedding shard of ``rows`` x ``dim``."""
    return 4 * rows * (STATE_PER_ROW[optimizer] + dim * STATE_PER_ELEMENT[optimizer])


def reserve_bytes(capacity: int) -> int:
    """Bytes of a device the planner never fills: context plus allocator margin."""
    return CONTEXT_BYTES + int(ALLOCATOR_MARGIN * capacity)


def shard_shapes(rows: int, dim: int, sharding: str, shards: int) -> list[tuple[int, int]]:
    """(rows, dim) of each shard, as ``polyrec.runtime.shards.make_shards`` cuts them: row-wise in
    ranges of ``ceil(rows / shards)`` (the last shard takes what is left); column-wise in ``shards``
    equal slices (``dim`` must divide)."""
    if sharding == "table_wise" or shards == 1:
        return [(rows, dim)]
    if sharding == "row_wise":
        step = math.ceil(rows / shards)
        return [(max(0, min((i + 1) * step, rows) - min(i * step, rows)), dim) for i in range(shards)]
    if sharding == "column_wise":
        if dim % shards:
            raise ValueError(f"column-wise sharding needs dim {dim} divisible by {shards} shards")
        return [(rows, dim // shards)] * shards
    raise ValueError(f"unknown sharding {sharding!r}")


def shard_device_bytes(rows: int, dim: int, *, weight_dtype: str, optimizer: str, memory: str,
                       cache_rows: int) -> tuple[int, int, int]:
    """(HBM weight bytes, HBM optimizer-state bytes, host bytes) of one shard.

    A host-cached shard keeps rows and state in host memory; HBM holds ``cache_rows`` rows plus metadata.
    """
    weights, state = weight_bytes(rows, dim, weight_dtype), state_bytes(rows, dim, optimizer)
    if memory == "hbm":
        return weights, state, 0
    cached = min(cache_rows, rows)
    return weight_bytes(cached, dim, weight_dtype) + cached * CACHE_META_BYTES_PER_ROW, 0, weights + state


def embedding_activation_bytes(*, lookups: float, bags: int, pooled_values: int, local_batch: int,
                               exchanged_dim: int, num_dense: int, compute_bytes: int) -> int:
    """Embedding-side tensors alive through the step on one rank.

    ``lookups`` / ``bags``: ids and bags this rank's shards process (int64 values and offsets, kept by
    the lookup for its backward); ``pooled_values``: values of their pooled outputs (in the dense
    compute dtype, polyrec.kernels.tbe ``output_dtype``); ``exchanged_dim``: on several ranks, the
    feature values per sample of the rank's own samples after the all-to-all (``local_batch`` x
    ``exchanged_dim``; 0 on one rank, whose pooled outputs are its features); the dense inputs and
    labels (fp32).
    """
    indices = INDEX_BYTES * (math.ceil(lookups) + bags + 1)
    exchanged = compute_bytes * local_batch * exchanged_dim
    return indices + compute_bytes * pooled_values + exchanged + 4 * local_batch * (num_dense + 1)


def split_index_bytes(*, lookups: float, bags: int, modules: int) -> int:
    """Ids and offsets of one lookup split between ``modules`` TBE modules (tables of several row dtypes): each
    module's copy of its features' (int64, ``polyrec.models.mixed_embeddings.feature_subset``), kept for its
    backward (``polyrec.kernels.tbe_lookups.lookup_shared``) beside the batch's own; none for one module."""
    return 0 if modules < 2 else INDEX_BYTES * (math.ceil(lookups) + bags + modules)


def held_key_bytes(lookups: float, world_size: int) -> int:
    """Bytes a rank holds through the dense half for the embedding backward of ``lookups`` ids: the sort
    keys the forward writes (FORWARD_KEYS_BYTES_PER_LOOKUP); on several ranks the backward's sorted ids,
    made during the forward (PREPARED_BYTES_PER_LOOKUP: polyrec.kernels.tbe ``prepare_backward``, called by
    polyrec.runtime.sharding)."""
    per_lookup = PREPARED_BYTES_PER_LOOKUP if world_size > 1 else FORWARD_KEYS_BYTES_PER_LOOKUP
    return int(per_lookup * lookups)


def tbe_workspace_bytes(*, lookups: float, block_d: int, tile: int, wide_keys: bool = False) -> int:
    """Transient buffers of one TBE module's backward (see TBE_BYTES_PER_LOOKUP) plus its partial rows
    (``[2 * ceil(lookups / tile), block_d]`` fp32)."""
    per_lookup = TBE_BYTES_PER_LOOKUP + (TBE_WIDE_KEY_EXTRA if wide_keys else 0)
    return int(lookups * per_lookup + 2 * math.ceil(lookups / max(tile, 1)) * block_d * 4)


def dense_parameter_bytes(model: ModelSpec, *, dense_optimizer: str, world_size: int) -> tuple[int, int]:
    """(weights, optimizer state + gradients) of the dense layers on each rank (data parallel).

    fp32 master weights; fp32 gradients; DDP's gradient buckets (a second gradient-sized buffer when
    more than one rank); the optimizer's fp32 state.
    """
    params = dense_params(model)
    grads = 4 * params * (2 if world_size > 1 else 1)
    return 4 * params, grads + 4 * params * DENSE_STATE_PER_PARAM[dense_optimizer]


def dense_activation_bytes(model: ModelSpec, batch: int, dense_dtype: str,
                           x0_in_lookup: bool = False) -> tuple[int, int]:
    """(activations, workspace) of the dense layers at the peak of their backward, ``batch`` samples.

    Activations: per sample, the saved tensors and backward buffers of ``planner.ops`` at the worst
    layer, plus the compute-dtype copies of the weights (cast by the forward and kept for the backward,
    or with Adagrad kept between steps: ``polyrec.kernels.master_copies``); workspace: BLAS.
    ``x0_in_lookup`` as ``planner.ops.dense_inventory`` takes it.
    """
    cb = DENSE_DTYPE_BYTES[dense_dtype]
    inv = dense_inventory(model, batch, cb, x0_in_lookup, fp8=dense_dtype == "fp8")
    casts = cb * dense_params(model) if cb < 4 else 0
    return int(activation_peak_per_sample(inv) * batch) + casts, BLAS_WORKSPACE_BYTES
