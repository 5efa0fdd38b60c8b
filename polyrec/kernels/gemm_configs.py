"""Launch configurations of the Triton GEMM: the config dataclass, the space an exhaustive autotuner
would sweep on each target, and the compile jobs that prove the selectable configs fit every target.

The space is static per (device, dtype): tile shapes x warps x pipeline depth x grouping x split-K,
and on AMD also ``waves_per_eu``, ``matrix_instr_nonkdim`` and ``kpack``. Configs that cannot fit
the device (shared memory / LDS, registers: see ``polyrec.perfmodel.gemm.footprint``) are left out,
so the space is exactly what the selector may choose from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.gemm import GEMM_DTYPES, footprint

#: Split-K factors an autotuner would try for large-K / small-MN shapes (wgrad: K = batch).
SPLIT_K_FACTORS: tuple[int, ...] = (2, 4, 8, 16)
#: Tiles that get split-K variants: small and medium output tiles, where the grid is too small to
#: fill the device without splitting K.
SPLIT_K_TILES: tuple[tuple[int, int], ...] = ((64, 64), (64, 128), (128, 64), (128, 128))
#: Block of the split-K reduction kernel (elementwise, memory bound; [rows, cols] per program).
REDUCE_BLOCK_M = 32
REDUCE_BLOCK_N = 128
REDUCE_NUM_WARPS = 4


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

    @property
    def label(self) -> str:
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
    space = tuple(c for c in make(spec, dtype) if footprint(c, dtype, spec).fits)
    _SPACES[(id(spec), dtype)] = (spec, space)
    return space


def configs_for_shape(space: tuple[GemmConfig, ...], m: int, n: int, k: int) -> list[GemmConfig]:
    """The configs of a space worth running on one shape: split-K only where every split gets at
    least two K steps and the output grid alone is smaller than the split would make up for."""
    out = []
    for c in space:
        if c.split_k > 1 and k < 2 * c.split_k * c.block_k:
            continue
        out.append(c)
    return out


def compile_jobs(spec: DeviceSpec, configs: list[GemmConfig] | None = None,
                 dtypes: tuple[str, ...] = ("bf16",)) -> list[CompileJob]:
    """Compile jobs for the GEMM kernels in each dtype: ``configs`` with the cross epilogue (the
    largest), or by default the configs the selector picks for ``dlrm_suite()`` with each shape's own
    epilogue; plus the split-K reduction kernel."""
    from polyrec.kernels.gemm_kernels import compile_job_for, reduce_compile_job
    from polyrec.kernels.gemm_select import select_gemm

    jobs = []
    for dtype in dtypes:
        if configs is None:
            chosen = {(select_gemm(s.m, s.n, s.k, dtype, spec, epilogue=s.epilogue,
                                   b_k_major=s.layout[1] == "T").config,
                       s.epilogue if s.epilogue in ("none", "cross") else "bias_relu"): None for s in dlrm_suite()}
        else:
            chosen = {(c, "cross"): None for c in configs}
        jobs += [compile_job_for(c, dtype, spec, epilogue=e) for c, e in chosen]
        jobs.append(reduce_compile_job(dtype))
    return jobs


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmShape:
    """One GEMM of a workload: C[m, n] = op(A) @ op(B) with an epilogue."""

    name: str  # what it is, e.g. "fwd cross-U B65536"
    m: int
    n: int
    k: int
    layout: str  # "NT" (forward x @ Wᵀ), "NN" (dgrad g @ W), "TN" (wgrad gᵀ @ x)
    epilogue: str = "none"  # a key of polyrec.perfmodel.gemm.EPILOGUE_READS


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
