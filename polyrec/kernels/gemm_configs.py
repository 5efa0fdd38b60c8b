"""Launch configurations of the Triton GEMM: the config dataclass, the space an exhaustive autotuner
would sweep on each target, and the compile jobs that prove the selectable configs fit every target.

The space is static per (device, dtype): tile shapes x warps x pipeline depth x grouping x split-K,
and on AMD also ``waves_per_eu``, ``matrix_instr_nonkdim`` and ``kpack``; on Hopper (sm_90) with 2-byte
inputs also a few configs of the persistent TMA kernel (``polyrec.kernels.gemm_tma``,
``GemmConfig.persistent_tma``), which ``configs_for_shape`` keeps only where that kernel can run.
Configs that cannot fit
the device (shared memory / LDS, registers: see ``polyrec.perfmodel.gemm_footprint.footprint``) are left out,
so the space is exactly what the selector may choose from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.gemm import GEMM_DTYPES, footprint
from polyrec.perfmodel.gemm_tma import TMA_EPILOGUES

#: Split-K factors an autotuner would try for large-K / small-MN shapes (wgrad: K = batch).
SPLIT_K_FACTORS: tuple[int, ...] = (2, 4, 8, 16)
#: Tiles that get split-K variants: small and medium output tiles, where the grid is too small to
#: fill the device without splitting K.
SPLIT_K_TILES: tuple[tuple[int, int], ...] = ((64, 64), (64, 128), (128, 64), (128, 128))
#: Block of the split-K reduction kernel (elementwise, memory bound; [rows, cols] per program).
REDUCE_BLOCK_M = 32
REDUCE_BLOCK_N = 128
REDUCE_NUM_WARPS = 4
#: Warps of the CrossGrad pass writing only g's fp8 copies (``epilogue_pass``'s ``fp8_only``), at the
#: shared REDUCE_BLOCK_M x REDUCE_BLOCK_N tile: 0.743 / 0.755 ms on MLPerf's [65536, 3456] in two runs against
#: 0.846 / 0.857 at the 32 x 64, 4-warp tile it ran at before; the fastest of the tiles tried then, and of
#: ``cross_pass_probe.py --fp8``'s 12 after the change (0.771 ms; H200,
#: benchmarks/results/fp8_pass_tiles_2026-12-04/).
FP8_ONLY_PASS_NUM_WARPS = 8
#: Row blocks (of REDUCE_BLOCK_M rows) one program of the CrossGrad epilogue pass walks, summing its
#: bias-gradient column partial once at the end instead of once per block: on MLPerf's [65536, 3456]
#: bf16 the per-block column sum cost that pass 0.12 of 0.81 ms (H200,
#: benchmarks/results/cross_pass_probe_2026-12-01). Halved while the batch would leave fewer than
#: PASS_MIN_ROW_PROGRAMS row programs (programs to keep the device's memory system busy).
PASS_ROW_BLOCKS = 8
PASS_MIN_ROW_PROGRAMS = 256
#: Smallest ``block_k``: Triton 3.6's ``tl.dot`` on NVIDIA takes K >= 16 for 16- and 32-bit operands
#: (``min_dot_size`` in triton/backends/nvidia/compiler.py; "Input shapes should have ... K >= 16").
MIN_BLOCK_K = 16


def pass_row_blocks(m: int) -> int:
    """Row blocks per program of the CrossGrad pass over ``m`` rows (``PASS_ROW_BLOCKS``, halved while
    fewer than ``PASS_MIN_ROW_PROGRAMS`` row programs would remain; at least 1)."""
    blocks = PASS_ROW_BLOCKS
    while blocks > 1 and -(-m // (REDUCE_BLOCK_M * blocks)) < PASS_MIN_ROW_PROGRAMS:
        blocks //= 2
    return blocks


def pass_partial_rows(m: int) -> int:
    """Rows of ``m`` summed into one bias-gradient partial row by the library path's CrossGrad pass
    (``polyrec.kernels.gemm_epilogue.apply_epilogue``): the rows one program walks."""
    return REDUCE_BLOCK_M * pass_row_blocks(m)


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmConfig:
    """One launch configuration of the GEMM kernel."""

    block_m: int  # rows of C per program
    block_n: int  # columns of C per program
    block_k: int  # depth of one main-loop step
    group_m: int = 8  # programs that walk down M together before moving along N (L2 reuse)
    split_k: int = 1  # programs along K; > 1 writes fp32 partials reduced by a second kernel
    num_warps: int = 4  # warps (NVIDIA, 32 threads) / wavefronts (AMD, 64 threads) per program
    num_stages: int = 3  # software-pipeline depth (shared-memory / LDS buffers of A and B tiles)
    waves_per_eu: int = 0  # AMD: occupancy hint, waves per SIMD (0 = compiler's choice)
    matrix_instr_nonkdim: int = 0  # AMD: MFMA M=N size, 16 or 32 (0 = compiler's choice)
    kpack: int = 1  # AMD gfx942: elements packed per K step of the MFMA operand load (1 or 2)
    persistent_tma: bool = False  # sm_90: the persistent TMA kernel (polyrec.kernels.gemm_tma) runs it
    epilogue_subtile: bool = False  # TMA: finish and store the tile in two [BM, BN/2] halves
    ctas_per_sm: int = 1  # TMA: persistent programs per SM (grid = min(tiles, SMs x ctas_per_sm))

    def __post_init__(self) -> None:
        """Refuse what no kernel can run: block sides and warps that are not powers of two (``tl.arange`` and
        Triton's launch need them), ``block_k`` below ``MIN_BLOCK_K``, and counts below 1 (a ``group_m`` of 0
        computed a wrong product without an error; a ``split_k`` of 0 divided by zero)."""
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"GemmConfig: {name} must be a power of two, got {value}")
        if self.block_k < MIN_BLOCK_K:
            raise ValueError(f"GemmConfig: block_k must be at least {MIN_BLOCK_K} (tl.dot), got {self.block_k}")
        for name in ("group_m", "split_k", "num_stages", "ctas_per_sm"):
            if getattr(self, name) < 1:
                raise ValueError(f"GemmConfig: {name} must be at least 1, got {getattr(self, name)}")

    @property
    def label(self) -> str:
        if self.persistent_tma:
            return (f"TMA BM{self.block_m} BN{self.block_n} BK{self.block_k} G{self.group_m} w{self.num_warps} "
                    f"s{self.num_stages} c{self.ctas_per_sm}" + (" sub" if self.epilogue_subtile else ""))
        text = (f"BM{self.block_m} BN{self.block_n} BK{self.block_k} G{self.group_m} SK{self.split_k} "
                f"w{self.num_warps} s{self.num_stages}")
        if self.waves_per_eu or self.matrix_instr_nonkdim or self.kpack != 1:
            text += f" wpe{self.waves_per_eu} mi{self.matrix_instr_nonkdim} kp{self.kpack}"
        return text

    def launch_options(self, backend: str) -> dict[str, int]:
        """Keyword options of the Triton launch for a backend ("cuda" or "hip")."""
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if backend == "hip":
            options |= {"waves_per_eu": self.waves_per_eu, "matrix_instr_nonkdim": self.matrix_instr_nonkdim,
                        "kpack": self.kpack}
        return options


def _element_bytes(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def _nvidia_candidates(spec: DeviceSpec, dtype: str) -> list[GemmConfig]:
    block_ks = (32, 64, 128) if _element_bytes(dtype) == 2 else (16, 32, 64)
    tiles = [(bm, bn) for bm in (64, 128, 256) for bn in (32, 64, 128, 256)]
    out = []
    for (bm, bn), bk, warps, stages in itertools.product(tiles, block_ks, (4, 8), (3, 4, 5)):
        out.append(GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages))
    for (bm, bn), split in itertools.product(SPLIT_K_TILES, SPLIT_K_FACTORS):
        for warps in (4, 8):
            out.append(GemmConfig(block_m=bm, block_n=bn, block_k=block_ks[1], num_warps=warps,
                                  num_stages=4, split_k=split))
    return out


#: The persistent TMA kernel's configs on sm_90 (bf16 / fp16), as (BM, BN, BK, warps, stages,
#: ctas_per_sm, epilogue_subtile), informed by benchmarks/results/gemm_tma_probe_nvidia-h200_2026-11-29.json:
#: BM128 x BN256 x BK64, 8 warps, 3 stages won the cross, top1 and top2 forwards (subtiled) and the
#: NN dgrad (full tile); BM256 x BN128 subtiled was within 2% on the cross forward; BM128 x BN128 at
#: 4 stages (4 or 8 warps) came next; two programs per SM (2-3 stages) were never best at batch 16K-64K
#: but are kept for grids of fewer tiles than SMs x 2. Left out: BN256 with 4 stages and any full
#: 256-wide cross epilogue (out of shared memory in the probe: the footprint model excludes them), L2
#: prefetch (slower on every shape but the smallest) and warp specialization (a no-op on sm_90 in
#: Triton 3.6). Smaller tiles (BM 64) serve the small-M / small-N shapes. Order matters only for
#: ties (the model does not price the subtile's register relief outside the cross epilogue): the
#: subtiled BN256 comes first (0-7% faster on top1 / top2), the full BN128 before its subtiled twin
#: (4-6% faster on every non-cross shape).
TMA_TILES: tuple[tuple[int, int, int, int, int, int, bool], ...] = (
    (128, 256, 64, 8, 3, 1, True), (128, 256, 64, 8, 3, 1, False), (256, 128, 64, 8, 3, 1, True),
    (256, 128, 64, 8, 3, 1, False), (128, 128, 64, 8, 4, 1, False), (128, 128, 64, 4, 4, 1, False),
    (128, 128, 64, 8, 3, 1, False), (128, 128, 64, 8, 4, 1, True), (128, 128, 64, 8, 2, 2, True),
    (128, 128, 32, 8, 3, 2, True), (128, 64, 64, 4, 3, 2, False), (128, 64, 64, 4, 4, 1, False),
    (64, 128, 64, 4, 4, 1, False), (64, 256, 64, 4, 3, 1, True), (64, 64, 64, 4, 4, 2, False),
)


def _tma_candidates(spec: DeviceSpec, dtype: str) -> list[GemmConfig]:
    """The persistent TMA kernel's configs: sm_90 with 2-byte inputs only (``gemm_tma`` is Hopper-only
    and takes bf16 / fp16)."""
    if spec.arch != "sm_90" or _element_bytes(dtype) != 2:
        return []
    return [GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=st, ctas_per_sm=c,
                       epilogue_subtile=sub, persistent_tma=True) for bm, bn, bk, w, st, c, sub in TMA_TILES]


def _amd_candidates(spec: DeviceSpec, dtype: str) -> list[GemmConfig]:
    block_ks = (32, 64, 128) if _element_bytes(dtype) == 2 else (16, 32, 64)
    tiles = [(bm, bn) for bm in (64, 128, 256) for bn in (64, 128, 256)]
    kpacks = (1, 2) if spec.arch == "gfx942" and _element_bytes(dtype) == 2 else (1,)
    out = []
    for (bm, bn), bk, warps, wpe, nonk, kpack in itertools.product(
            tiles, block_ks, (4, 8), (0, 2), (16, 32), kpacks):
        out.append(GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=2,
                              waves_per_eu=wpe, matrix_instr_nonkdim=nonk, kpack=kpack))
    for (bm, bn), split in itertools.product(SPLIT_K_TILES, SPLIT_K_FACTORS):
        out.append(GemmConfig(block_m=bm, block_n=bn, block_k=block_ks[1], num_warps=4, num_stages=2,
                              split_k=split, matrix_instr_nonkdim=16))
    return out


_SPACES: dict[tuple[int, str], tuple[DeviceSpec, tuple[GemmConfig, ...]]] = {}


def config_space(spec: DeviceSpec, dtype: str) -> tuple[GemmConfig, ...]:
    """Every config an exhaustive autotuner would sweep on ``spec`` for ``dtype``, minus those that
    cannot fit the device (shared memory / LDS or registers, from the analytical footprint).
    Cached per spec object (kept alive with its entry, so its id is not reused)."""
    cached = _SPACES.get((id(spec), dtype))
    if cached is not None:
        return cached[1]
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"config_space: dtype must be one of {GEMM_DTYPES}, got {dtype!r}")
    if spec.triton is None:
        raise ValueError(f"config_space: {spec.name} has no Triton target")
    make = _amd_candidates if spec.triton.backend == "hip" else _nvidia_candidates
    candidates = make(spec, dtype) + _tma_candidates(spec, dtype)
    space = tuple(c for c in candidates if footprint(c, dtype, spec).fits)
    _SPACES[(id(spec), dtype)] = (spec, space)
    return space


#: TMA descriptors need 16-byte aligned rows (global strides; ``polyrec.kernels.gemm_tma.TMA_ALIGN_BYTES``).
TMA_ROW_BYTES = 16


def tma_runs(n: int, k: int, dtype: str, *, epilogue: str = "none", out_bytes: int = 0,
             a_row_major: bool = True, aligned: bool = True) -> bool:
    """Whether the persistent TMA kernel can run this GEMM: an epilogue it has, A row-major (not the
    wgrad's Aᵀ), the output in the inputs' 2-byte dtype, and every row of A [M, K], B ([K, N] or
    [N, K]) and C / x0 / x [M, N] 16-byte aligned; ``aligned``: the operands' base pointers and
    strides are (``polyrec.perfmodel.gemm.GemmProblem.a_aligned``)."""
    elem = _element_bytes(dtype)
    return (epilogue in TMA_EPILOGUES and a_row_major and aligned and elem == 2 and out_bytes in (0, elem)
            and (k * elem) % TMA_ROW_BYTES == 0 and (n * elem) % TMA_ROW_BYTES == 0)


def configs_for_shape(space: tuple[GemmConfig, ...], m: int, n: int, k: int, *, tma: bool = True) -> list[GemmConfig]:
    """The configs of a space worth running on one shape: split-K only where every split gets at
    least two K steps and the output grid alone is smaller than the split would make up for; the
    persistent TMA kernel's only where ``tma`` (``tma_runs``: the caller knows layout and epilogue)."""
    out = []
    for c in space:
        if c.split_k > 1 and k < 2 * c.split_k * c.block_k:
            continue
        if c.persistent_tma and not tma:
            continue
        out.append(c)
    return out


def compile_jobs(spec: DeviceSpec, configs: list[GemmConfig] | None = None,
                 dtypes: tuple[str, ...] = ("bf16",)) -> list[CompileJob]:
    """Compile jobs for the GEMM kernels in each dtype: ``configs`` with the cross epilogue (the
    largest) and a K-major B, or by default the configs the selector picks for ``dlrm_suite()`` with
    each shape's own epilogue and B layout (TMA configs compile ``gemm_tma_kernel``: sm_90 only, as
    the space has them there only); plus the split-K reduction kernel."""
    from polyrec.kernels.gemm_kernels import compile_job_for, reduce_compile_job
    from polyrec.kernels.gemm_select import select_gemm

    jobs = []
    for dtype in dtypes:
        if configs is None:
            chosen = {(select_gemm(s.m, s.n, s.k, dtype, spec, epilogue=s.epilogue, b_k_major=s.layout[1] == "T",
                                   a_row_major=s.layout[0] == "N").config, _compile_epilogue(s.epilogue),
                       s.layout[1] == "T"): None for s in dlrm_suite()}
        else:
            chosen = {(c, "cross", True): None for c in configs}
        jobs += [compile_job_for(c, dtype, spec, epilogue=e, trans_b=t) for c, e, t in chosen]
        jobs.append(reduce_compile_job(dtype))
    return jobs


def _compile_epilogue(epilogue: str) -> str:
    """The compile job's epilogue for a shape's: "none", "cross", else the largest of the rest."""
    return epilogue if epilogue in ("none", "cross") else "bias_relu"


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmShape:
    """One GEMM of a workload: C[m, n] = op(A) @ op(B) with an epilogue."""

    name: str  # what it is, e.g. "fwd cross-U B65536"
    m: int
    n: int
    k: int
    layout: str  # "NT" (forward x @ Wᵀ), "NN" (dgrad g @ W), "TN" (wgrad gᵀ @ x)
    epilogue: str = "none"  # a key of polyrec.perfmodel.gemm_footprint.EPILOGUE_TENSORS


#: MLPerf DLRM-DCNv2 dense layers (in, out, forward epilogue): bottom MLP 13-512-256-128, the
#: low-rank (512) cross layers over 3456 = 27 x 128 features (V: down-projection, U: up-projection with
#: the cross update), top MLP 3456-1024-1024-512-256 (-1, memory bound, left to the library).
DCNV2_LAYERS: tuple[tuple[str, int, int, str], ...] = (
    ("bottom1", 13, 512, "bias_relu"), ("bottom2", 512, 256, "bias_relu"), ("bottom3", 256, 128, "bias_relu"),
    ("cross-V", 3456, 512, "none"), ("cross-U", 512, 3456, "cross"),
    ("top1", 3456, 1024, "bias_relu"), ("top2", 1024, 1024, "bias_relu"), ("top3", 1024, 512, "bias_relu"),
    ("top4", 512, 256, "bias_relu"),
)


def dlrm_suite() -> list[GemmShape]:
    """The benchmark / compile-fit suite: DLRM-DCNv2 forward at batch 2K-64K, dgrad and wgrad at 16K
    and 64K, square, skinny and odd shapes (38 GEMMs)."""
    layers = {name: (fan_in, fan_out, epi) for name, fan_in, fan_out, epi in DCNV2_LAYERS}
    shapes = [GemmShape(name=f"fwd {n} B65536", m=65536, n=o, k=i, layout="NT", epilogue=e)
              for n, (i, o, e) in layers.items()]
    for batch in (2048, 16384):
        for name in ("bottom1", "cross-V", "cross-U", "top1"):
            i, o, e = layers[name]
            shapes.append(GemmShape(name=f"fwd {name} B{batch}", m=batch, n=o, k=i, layout="NT", epilogue=e))
    for batch in (16384, 65536):
        for name in ("cross-V", "cross-U", "top1"):
            i, o, _ = layers[name]
            shapes.append(GemmShape(name=f"dgrad {name} B{batch}", m=batch, n=i, k=o, layout="NN"))
            shapes.append(GemmShape(name=f"wgrad {name} B{batch}", m=o, n=i, k=batch, layout="TN"))
    shapes.append(GemmShape(name="wgrad bottom1 B65536", m=512, n=13, k=65536, layout="TN"))
    shapes += [GemmShape(name=f"square {s}", m=s, n=s, k=s, layout="NN") for s in (1024, 4096, 8192)]
    shapes += [GemmShape(name="skinny tall", m=65536, n=64, k=4096, layout="NN"),
               GemmShape(name="skinny wide", m=64, n=65536, k=4096, layout="NN")]
    shapes += [GemmShape(name=f"odd {m}x{n}x{k}", m=m, n=n, k=k, layout="NN", epilogue="bias")
               for m, n, k in ((17, 33, 29), (1000, 999, 1001), (4097, 513, 1023))]
    return shapes
