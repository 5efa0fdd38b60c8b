"""Pooled rows from every source rank placed into the output's columns in one kernel, and back.

After the output all-to-all of sharded embeddings (``polyrec.runtime.sharding``), a rank holds
``flat``: the concatenation over source ranks r of row-major blocks [B, dims[r]], where column j of
block r belongs to output column cols[r][j] of ``out`` [B, out_dim].

- ``place(flat, b, layout) -> out``: every output column copied from its one source column (copy
  layout), or, where row-wise shards meet, the sum of its source columns taken in a fixed order
  (rank, then column within the rank's block) in fp32 and rounded once; columns no block covers are 0
  (add layout). No atomics: one program owns each output element, so results are deterministic.
- ``gather(grad, b, layout, scale) -> flat``: block r = grad[:, cols[r]] * scale (the backward),
  computed as ``grad * scale`` in fp32 and rounded to grad's dtype, as torch's ``mul`` by a scalar.

``column_layout(dims, cols, out_dim, add, device)`` builds, once per sharding on the host, the tile
tables both kernels walk: the columns are cut into runs where consecutive source columns land on
consecutive output columns (a whole 128-wide feature of a table-wise shard is one run), and runs into
tiles of at most BLOCK_N columns. A program moves BLOCK_M rows of one tile; its grid is 1-D with the
tile index varying fastest, so consecutive programs sweep one band of rows across all columns.

Where Triton cannot run (CPU tensors without ``TRITON_INTERPRET``) and for float64 (the kernels add
in fp32), torch ops give the same results: ``index_copy_`` / ``index_add_`` into an fp32 (float64)
accumulator in the same order, ``index_select`` times the scale. (Triton 3.6's CPU interpreter
rounds fp32 -> bf16 toward zero, ``cast_impl`` in triton/runtime/interpreter.py, where the GPU rounds
to nearest even: under the interpreter bf16 sums and scaled gradients may be one bf16 ulp off; copies
are exact everywhere.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting
from polyrec.kernels.tbe_select import warps_for

_TRITON_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}
#: dtypes placed by the torch ops on every device (the kernels accumulate in fp32).
_TORCH_ONLY_TYPES = (torch.float64,)
#: Elements one program moves (BLOCK_M x BLOCK_N): 8 KB read + 8 KB written in bf16, 16 + 16 KB in
#: fp32 - a few tens of KB, as in dense_backward's streaming pass. 4096 / BLOCK_N rows per program
#: give B=65536 x 26 tiles of 128 columns (MLPerf) 53K programs, ~25 waves of 16 programs per SM.
TILE_ELEMENTS = 4096
#: Tile widths in columns. 128: one table-wise MLPerf feature (D = 128, 256 B of bf16 per row, two
#: full 128-B lines); narrower tiles for narrow shards (D = 16 in dcnv2-small, column-wise pieces).
BLOCK_NS = (16, 32, 64, 128)
#: The widest tile is taken whose padding (lanes masked off at run ends) stays within this fraction
#: of the columns moved: 25% of the lanes idle costs less than doubling the programs of narrow runs.
MAX_PADDING = 0.25
#: Elements per lane: 32 = four 16-byte loads of bf16 in flight per lane (eight of fp32), so a tile
#: takes 4 warps on NVIDIA (warp 32) and 2 wavefronts on AMD (wave64), 128 lanes either way.
ELEMS_PER_THREAD = 32
#: Vector access width in bytes: the alignment hint on the table entries (VEC elements) lets a lane
#: load and store 16 B at once where every entry is a multiple of VEC.
VECTOR_BYTES = 16
#: int32 entries of a gather tile: block start (prefix of dims), block width, source column, output
#: column, width. A place tile: output column, width, source count, then (start, width, column) per source.
GATHER_ENTRY = 5
SOURCE_ENTRY = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class PlaceConfig:
    """Launch configuration of ``place_columns_kernel`` / ``gather_columns_kernel``."""

    block_m: int  # rows per program (power of two)
    block_n: int  # tile width in columns (power of two): the layout's tables are cut at it
    num_warps: int
    vec: int  # elements every table entry is a multiple of (alignment hint; 1 = none)

    @property
    def label(self) -> str:
        return f"BM{self.block_m} BN{self.block_n} V{self.vec} w{self.num_warps}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ColumnLayout:
    """Where each source rank's pooled columns go, as tile tables on ``device`` (``column_layout``)."""

    dims: tuple[int, ...]  # columns of each source rank's block
    out_dim: int  # output columns
    add: bool  # partial sums meet (add layout) or every output column has one source (copy layout)
    device: torch.device
    place_tiles: torch.Tensor  # [T_p, 3 + 3 * max_sources] int32, output-major
    place_block_n: int
    gather_tiles: torch.Tensor  # [T_g, GATHER_ENTRY] int32, source-major
    gather_block_n: int
    align: int  # largest power of two (<= 16) dividing every table entry and out_dim
    rank_cols: tuple[torch.Tensor, ...]  # per rank [dims[r]] int64 output columns (the torch path)


def _runs(cols: Sequence[int]) -> list[tuple[int, int, int]]:
    """(source column, output column, width) of the maximal runs of consecutive columns landing on
    consecutive output columns."""
    runs: list[tuple[int, int, int]] = []
    for j, c in enumerate(cols):
        if runs and c == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((j, c, 1))
    return runs


def _segments(cols: Sequence[Sequence[int]], out_dim: int) -> list[tuple[int, int, list]]:
    """(output column, width, sources) of the maximal output ranges whose columns have the same number
    of sources, each continuing its source block's previous column; sources as (rank, column), in
    rank then column order (the fixed summation order)."""
    per_column: list[list[tuple[int, int]]] = [[] for _ in range(out_dim)]
    for r, rank_cols in enumerate(cols):
        for j, c in enumerate(rank_cols):
            per_column[c].append((r, j))
    segments: list[tuple[int, int, list]] = []
    for o, sources in enumerate(per_column):
        if segments:
            start, width, first = segments[-1]
            if len(first) == len(sources) and all(s == (r, j + width) for (r, j), s in zip(first, sources)):
                segments[-1] = (start, width + 1, first)
                continue
        segments.append((o, 1, sources))
    return segments


def _block_n(widths: Sequence[int]) -> int:
    """The widest of BLOCK_NS whose masked-off lanes stay within MAX_PADDING of the columns."""
    columns = sum(widths)
    for block_n in reversed(BLOCK_NS):
        if sum(math.ceil(w / block_n) * block_n for w in widths) <= (1 + MAX_PADDING) * columns:
            return block_n
    return BLOCK_NS[0]


def _check_layout(dims: Sequence[int], cols: Sequence[Sequence[int]], out_dim: int, add: bool) -> None:
    if len(cols) != len(dims):
        raise ValueError(f"column_layout: {len(cols)} column lists for {len(dims)} source ranks")
    if out_dim < 0 or any(d < 0 for d in dims) or sum(dims) >= 2**31 or out_dim >= 2**31:
        raise ValueError(f"column_layout: dims {tuple(dims)} and out_dim {out_dim} must be >= 0 with sums < 2**31")
    for r, (d, rank_cols) in enumerate(zip(dims, cols)):
        if len(rank_cols) != d:
            raise ValueError(f"column_layout: rank {r} has {len(rank_cols)} output columns for dims[{r}] = {d}")
        bad = [c for c in rank_cols if not 0 <= c < out_dim]
        if bad:
            raise ValueError(f"column_layout: rank {r} names output column {bad[0]} outside [0, {out_dim})")
    if not add:
        hits = [0] * out_dim
        for rank_cols in cols:
            for c in rank_cols:
                hits[c] += 1
        wrong = next((c for c, n in enumerate(hits) if n != 1), None)
        if wrong is not None:
            raise ValueError(f"column_layout: a copy layout writes every output column once; column {wrong} has "
                             f"{hits[wrong]} sources (use add=True where partial sums meet)")


def column_layout(dims: Sequence[int], cols: Sequence[Sequence[int]], out_dim: int, add: bool,
                  device: torch.device | str, *, block_n: int | None = None) -> ColumnLayout:
    """The tile tables of one sharding (built once, on the host; a few ms for thousands of columns).

    dims[r]: columns of source rank r's block; cols[r][j]: the output column of its column j;
    ``add``: sum where several sources meet (else each output column must have exactly one source).
    ``block_n``: the tile width (one of BLOCK_NS, or any power of two for tests); None: ``_block_n``.
    """
    dims, cols = tuple(int(d) for d in dims), [[int(c) for c in rank_cols] for rank_cols in cols]
    _check_layout(dims, cols, out_dim, add)
    if block_n is not None and (block_n < 1 or block_n & (block_n - 1)):
        raise ValueError(f"column_layout: block_n must be a power of two, got {block_n}")
    starts = [sum(dims[:r]) for r in range(len(dims))]
    runs = [(r, *run) for r, rank_cols in enumerate(cols) for run in _runs(rank_cols)]
    segments = _segments(cols, out_dim)
    gather_n = block_n or _block_n([w for *_, w in runs])
    place_n = block_n or _block_n([w for _, w, _ in segments])
    gather_rows = [[starts[r], dims[r], j + i, o + i, min(gather_n, w - i)]
                   for r, j, o, w in runs for i in range(0, w, gather_n)]
    max_sources = max([len(s) for *_, s in segments] + [1])
    place_rows = []
    for o, w, sources in segments:
        for i in range(0, w, place_n):
            entry = [o + i, min(place_n, w - i), len(sources)]
            for r, j in sources:
                entry += [starts[r], dims[r], j + i]
            place_rows.append(entry + [0] * (3 + SOURCE_ENTRY * max_sources - len(entry)))
    hinted = [v for row in gather_rows for v in row] + [v for row in place_rows for v in row[:2] + row[3:]]
    common = math.gcd(out_dim, *hinted)  # every entry the kernels hint (all but the source counts)
    align = VECTOR_BYTES if common == 0 else min(VECTOR_BYTES, common & -common)
    device = torch.device(device)

    def table(rows: list[list[int]], width: int) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), width).to(device)

    place_tiles = table(place_rows, 3 + SOURCE_ENTRY * max_sources)
    return ColumnLayout(dims=dims, out_dim=out_dim, add=add, device=place_tiles.device,  # "cuda" -> "cuda:0"
                        place_tiles=place_tiles, place_block_n=place_n,
                        gather_tiles=table(gather_rows, GATHER_ENTRY), gather_block_n=gather_n, align=align,
                        rank_cols=tuple(torch.tensor(c, dtype=torch.int64, device=device) for c in cols))


def select_config(block_n: int, align: int, element_size: int, warp_size: int) -> PlaceConfig:
    """TILE_ELEMENTS per program over the layout's tile width, ELEMS_PER_THREAD per lane, and the
    widest 16-byte-or-less vector the table entries are aligned to."""
    return PlaceConfig(block_m=max(1, TILE_ELEMENTS // block_n), block_n=block_n,
                       num_warps=warps_for(TILE_ELEMENTS, warp_size, ELEMS_PER_THREAD),
                       vec=max(1, min(align, VECTOR_BYTES // element_size)))


@triton.jit
def _source_ptrs(flat_ptr, source_ptr, B, rows, cols, VEC: tl.constexpr):
    """Pointers [BM, BN] to columns col + cols of rows ``rows`` of the block (start, width, col) at
    ``source_ptr``: the block starts at element start * B of flat."""
    start = tl.multiple_of(tl.load(source_ptr), VEC).to(tl.int64) * B
    width = tl.multiple_of(tl.load(source_ptr + 1), VEC)
    col = tl.multiple_of(tl.load(source_ptr + 2), VEC)
    return flat_ptr + start + rows[:, None] * width + (col + cols)[None, :]


@triton.jit
def place_columns_kernel(
    flat_ptr, out_ptr, tiles_ptr,
    B, num_tiles, tile_entries, stride_ob,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, VEC: tl.constexpr,
):
    """One program: rows [row block * BLOCK_M, + BLOCK_M) of one output tile: its first source's
    columns, plus the others' in table order (fp32), or zeros for a tile without sources."""
    pid = tl.program_id(0)
    tile = pid % num_tiles
    rows = ((pid // num_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BM], 64-bit offsets
    cols = tl.arange(0, BLOCK_N)  # [BN]
    entry = tiles_ptr + tile * tile_entries
    out_col = tl.multiple_of(tl.load(entry), VEC)
    width = tl.multiple_of(tl.load(entry + 1), VEC)
    count = tl.load(entry + 2)
    mask = (rows < B)[:, None] & (cols < width)[None, :]  # [BM, BN]
    acc = tl.load(_source_ptrs(flat_ptr, entry + 3, B, rows, cols, VEC), mask=mask & (count > 0),
                  other=0.0).to(tl.float32)
    for k in range(1, count):
        acc += tl.load(_source_ptrs(flat_ptr, entry + 3 + 3 * k, B, rows, cols, VEC), mask=mask).to(tl.float32)
    out = out_ptr + rows[:, None] * stride_ob + (out_col + cols)[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gather_columns_kernel(
    grad_ptr, flat_ptr, tiles_ptr,
    B, num_tiles, stride_gb, stride_gc, scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, VEC: tl.constexpr,
):
    """One program: rows [row block * BLOCK_M, + BLOCK_M) of one source tile = its output columns of
    grad times ``scale`` (fp32 product, rounded to the gradient's dtype)."""
    pid = tl.program_id(0)
    tile = pid % num_tiles
    rows = ((pid // num_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BM], 64-bit offsets
    cols = tl.arange(0, BLOCK_N)  # [BN]
    entry = tiles_ptr + tile * 5  # GATHER_ENTRY int32 per tile
    out_col = tl.multiple_of(tl.load(entry + 3), VEC)
    width = tl.multiple_of(tl.load(entry + 4), VEC)
    mask = (rows < B)[:, None] & (cols < width)[None, :]  # [BM, BN]
    g = tl.load(grad_ptr + rows[:, None] * stride_gb + (out_col + cols)[None, :] * stride_gc, mask=mask)
    scaled = (g.to(tl.float32) * scale).to(flat_ptr.dtype.element_ty)
    tl.store(_source_ptrs(flat_ptr, entry, B, rows, cols, VEC), scaled, mask=mask)


@lru_cache(maxsize=None)
def _warp_size(device: torch.device) -> int:
    """Threads per warp / wavefront of a CUDA or ROCm device; 32 for the interpreter on the CPU."""
    if device.type != "cuda":
        return 32
    from polyrec.hardware.detect import read_props

    return read_props(device.index if device.index is not None else torch.cuda.current_device()).warp_size


def _runs_triton(t: torch.Tensor) -> bool:
    if t.dtype not in _TRITON_TYPES and t.dtype not in _TORCH_ONLY_TYPES:
        raise TypeError(f"place_columns: dtype {t.dtype} is not supported; use bfloat16, float16, float32 "
                        "(kernels) or float64 (torch ops)")
    return t.dtype in _TRITON_TYPES and (t.is_cuda or interpreting())


def _config(layout: ColumnLayout, block_n: int, t: torch.Tensor, config: PlaceConfig | None) -> PlaceConfig:
    if config is None:
        return select_config(block_n, layout.align, t.element_size(), _warp_size(t.device))
    if config.block_n != block_n or layout.align % config.vec or config.vec & (config.vec - 1):
        raise ValueError(f"place_columns: {config} does not fit the layout (tiles cut at {block_n} columns, "
                         f"entries aligned to {layout.align}: vec must be a power of two dividing it)")
    return config


def _check_device(name: str, t: torch.Tensor, layout: ColumnLayout) -> None:
    if t.device != layout.device:
        raise ValueError(f"{name}: tensor on {t.device}, the layout's tables on {layout.device}")


def _check_out(name: str, out: torch.Tensor, shape: tuple[int, ...], like: torch.Tensor) -> None:
    if out.shape != shape or out.dtype != like.dtype or out.device != like.device or not out.is_contiguous():
        strided = "" if out.is_contiguous() else ", strided"
        raise ValueError(f"{name}: out must be a contiguous {list(shape)} {like.dtype} tensor on {like.device}, "
                         f"got {list(out.shape)} {out.dtype} on {out.device}{strided}")


def place(flat: torch.Tensor, b: int, layout: ColumnLayout, *, out: torch.Tensor | None = None,
          config: PlaceConfig | None = None) -> torch.Tensor:
    """flat [b * sum(dims)] (block r: [b, dims[r]] row-major) -> out [b, out_dim] in flat's dtype.
    ``out``: a contiguous tensor to write (every element is written); ``config``: None selects one."""
    rows = sum(layout.dims)
    if b < 0 or flat.dim() != 1 or flat.numel() != b * rows:
        raise ValueError(f"place: flat must be 1-D with b * sum(dims) = {b} * {rows} elements, got shape "
                         f"{tuple(flat.shape)}")
    if flat.numel() and flat.stride(0) != 1:
        raise ValueError(f"place: flat must be contiguous, got stride {flat.stride(0)}")
    _check_device("place", flat, layout)
    if out is None:
        out = flat.new_empty(b, layout.out_dim)  # [B, out_dim]
    _check_out("place", out, (b, layout.out_dim), flat)
    if not _runs_triton(flat):
        return _place_torch(flat, b, layout, out)
    config = _config(layout, layout.place_block_n, flat, config)
    tiles = layout.place_tiles.shape[0]
    if b and tiles:
        place_columns_kernel[(ceil_div(b, config.block_m) * tiles,)](
            flat, out, layout.place_tiles, b, tiles, layout.place_tiles.shape[1], out.stride(0),
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, VEC=config.vec, num_warps=config.num_warps)
    return out


def gather(grad: torch.Tensor, b: int, layout: ColumnLayout, scale: float, *, out: torch.Tensor | None = None,
           config: PlaceConfig | None = None) -> torch.Tensor:
    """grad [b, out_dim] (any strides) -> flat [b * sum(dims)] in grad's dtype, block r = grad[:, cols[r]]
    * scale. ``out``: a contiguous tensor to write; ``config``: None selects one (``select_config``)."""
    if grad.shape != (b, layout.out_dim):
        raise ValueError(f"gather: grad must be [b, out_dim] = [{b}, {layout.out_dim}], got {tuple(grad.shape)}")
    _check_device("gather", grad, layout)
    if out is None:
        out = grad.new_empty(b * sum(layout.dims))  # [B * sum(dims)]
    _check_out("gather", out, (b * sum(layout.dims),), grad)
    if not _runs_triton(grad):
        return _gather_torch(grad, b, layout, scale, out)
    config = _config(layout, layout.gather_block_n, grad, config)
    tiles = layout.gather_tiles.shape[0]
    if b and tiles:
        gather_columns_kernel[(ceil_div(b, config.block_m) * tiles,)](
            grad, out, layout.gather_tiles, b, tiles, grad.stride(0), grad.stride(1), float(scale),
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, VEC=config.vec, num_warps=config.num_warps)
    return out


def _blocks(flat: torch.Tensor, b: int, layout: ColumnLayout) -> list[torch.Tensor]:
    """flat's blocks as [b, dims[r]] views."""
    return [block.view(b, d) for block, d in zip(flat.split([b * d for d in layout.dims]), layout.dims)]


def _place_torch(flat: torch.Tensor, b: int, layout: ColumnLayout, out: torch.Tensor) -> torch.Tensor:
    if not layout.add:
        for block, cols in zip(_blocks(flat, b, layout), layout.rank_cols):
            out.index_copy_(1, cols, block)
        return out
    acc_dtype = torch.float64 if flat.dtype == torch.float64 else torch.float32
    acc = flat.new_zeros(b, layout.out_dim, dtype=acc_dtype)  # [B, out_dim]
    for block, cols in zip(_blocks(flat, b, layout), layout.rank_cols):
        acc.index_add_(1, cols, block.to(acc_dtype))
    return out.copy_(acc)


def _gather_torch(grad: torch.Tensor, b: int, layout: ColumnLayout, scale: float, out: torch.Tensor) -> torch.Tensor:
    for part, cols in zip(_blocks(out, b, layout), layout.rank_cols):
        torch.mul(grad.index_select(1, cols), scale, out=part)
    return out


def compile_job(kind: str, dtype: torch.dtype, config: PlaceConfig) -> CompileJob:
    """``place`` or ``gather`` with one tile, launched as on the MLPerf shapes (aligned pointers, B and
    the row strides multiples of 16, unit column stride)."""
    ptr = _TRITON_TYPES[dtype]
    constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "VEC": config.vec}
    if kind == "place":
        kernel = place_columns_kernel
        signature = {"flat_ptr": ptr, "out_ptr": ptr, "tiles_ptr": "*i32", "B": "i32", "num_tiles": "i32",
                     "tile_entries": "i32", "stride_ob": "i32"}
        aligned = ("flat_ptr", "out_ptr", "tiles_ptr", "B", "stride_ob")
    else:
        kernel = gather_columns_kernel
        constexprs["stride_gc"] = 1
        signature = {"grad_ptr": ptr, "flat_ptr": ptr, "tiles_ptr": "*i32", "B": "i32", "num_tiles": "i32",
                     "stride_gb": "i32", "scale": "fp32"}
        aligned = ("grad_ptr", "flat_ptr", "tiles_ptr", "B", "stride_gb")
    signature |= {name: "constexpr" for name in constexprs}
    signature = {name: signature[name] for name in kernel.arg_names}
    return CompileJob(label=f"{kind}_columns {ptr[1:]} {config.label}", kernel=kernel, signature=signature,
                      constexprs=constexprs, num_warps=config.num_warps, num_stages=1, divisible_by_16=aligned)


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """Both kernels at every tile width ``select_config`` can choose, in bf16 (the pooled output of the
    MLPerf run) and fp32, with the widest vector hint and none (unaligned layouts)."""
    jobs = []
    for dtype in (torch.bfloat16, torch.float32):
        size = torch.tensor([], dtype=dtype).element_size()
        for block_n in BLOCK_NS:
            for align in (VECTOR_BYTES, 1):
                config = select_config(block_n, align, size, spec.warp_size)
                jobs += [compile_job(kind, dtype, config) for kind in ("place", "gather")]
    return jobs
