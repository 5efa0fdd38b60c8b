"""Zero-warmup GEMM selection: the config (and Triton vs the vendor library) from the performance model.

No kernel is ever timed: ``select_gemm`` ranks the device's config space with
``polyrec.perfmodel.gemm.estimate`` and keeps the fastest predicted config (of the classic Triton
kernel, or on sm_90 of the persistent TMA kernel where it can run); it then predicts the vendor
library (torch.matmul: cuBLAS / hipBLASLt) at the measured matmul ceiling, plus the one Triton pass
that applies the epilogue to the library's product when the GEMM has one, and picks whichever is
faster. Answers are cached per shape bucket, so a
repeated shape costs one dictionary lookup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyrec.hardware.calibrate import ceilings as device_ceilings
from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.kernels.gemm_configs import GemmConfig, config_space, configs_for_shape, pass_partial_rows, tma_runs
from polyrec.kernels.interpreter import interpreting
from polyrec.perfmodel.gemm import ALIGNMENT_ELEMENTS, EPILOGUE_TENSORS, GEMM_DTYPES, GemmProblem, estimate, rate_dtype
from polyrec.perfmodel.gemm_library import library_call_seconds

#: Dimensions up to this size are bucketed to a multiple of 16 (the smallest tile side, so every
#: tile count ``cdiv(x, block)`` is the same as for the exact size); larger ones to 1/16 octave.
EXACT_BUCKET_LIMIT = 8192
#: The config used where there is no GPU target and the Triton interpreter runs the kernel (tests on
#: the CPU): small tiles keep the interpreter's per-program numpy work small.
INTERPRETER_CONFIG = GemmConfig(block_m=32, block_n=32, block_k=32, group_m=4, num_warps=4, num_stages=2)


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmChoice:
    """What runs a GEMM: the Triton kernel with ``config``, or the vendor library."""

    backend: str  # "triton" or "library"
    config: GemmConfig  # the best Triton config of either kernel (also kept when the library is chosen)
    triton_seconds: float  # predicted seconds of one call (host launch floor included), inf where unknown
    library_seconds: float  # predicted, the fused epilogue pass included; inf where unknown
    gpu_seconds: float = math.inf  # predicted GPU time of the chosen backend (no host floor)

    @property
    def kernel(self) -> str:
        """What runs: "library", "tma" (the persistent TMA kernel) or "triton" (the classic kernel)."""
        if self.backend == "library":
            return "library"
        return "tma" if self.config.persistent_tma else "triton"


_CACHE: dict[tuple, GemmChoice] = {}
_SPECS: dict[int, tuple[DeviceSpec, tuple, Ceilings]] = {}
#: ``polyrec.kernels.gemm.matmul``'s answers per call signature (its ``_dispatch_key``): the checked
#: sizes and the choice, so a repeated call skips the checks and the selection inputs. Forgotten with
#: the selections (``clear_cache``).
DISPATCH: dict[tuple, tuple] = {}


def bucket(x: int) -> int:
    """The cache bucket of one dimension (see EXACT_BUCKET_LIMIT)."""
    if x <= EXACT_BUCKET_LIMIT:
        return max(16, -(-x // 16) * 16)
    step = 1 << (x.bit_length() - 5)
    return -(-x // step) * step


def _spec_entry(spec: DeviceSpec) -> tuple[DeviceSpec, tuple, Ceilings]:
    """(spec kept alive, hashable key of the numbers the model reads, ceilings), cached by identity."""
    entry = _SPECS.get(id(spec))
    if entry is None:
        key = (spec.name, spec.arch, spec.compute_units, spec.smem_per_block, spec.smem_per_cu,
               spec.registers_per_cu, spec.max_registers_per_thread, spec.l2_bytes, spec.xcd_count,
               spec.infinity_cache_bytes, spec.boost_clock_hz, spec.hbm_bandwidth,
               tuple(sorted(spec.peak_flops.items())))
        ceil = device_ceilings(spec) if spec.triton is not None else None
        entry = (spec, key, ceil)
        _SPECS[id(spec)] = entry
    return entry


def _check(m: int, n: int, k: int, dtype: str, epilogue: str) -> None:
    if min(m, n, k) < 1:
        raise ValueError(f"select_gemm: sizes must be >= 1, got M={m} N={n} K={k}")
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"select_gemm: dtype must be one of {GEMM_DTYPES}, got {dtype!r}")
    if epilogue not in EPILOGUE_TENSORS:
        raise ValueError(f"select_gemm: epilogue must be one of {tuple(EPILOGUE_TENSORS)}, got {epilogue!r}")


def problem_tma(problem: GemmProblem, a_row_major: bool = True) -> bool:
    """Whether the persistent TMA kernel can run ``problem`` (``polyrec.kernels.gemm_configs.tma_runs``)."""
    return tma_runs(problem.n, problem.k, problem.dtype, epilogue=problem.epilogue, out_bytes=problem.out_bytes,
                    a_row_major=a_row_major, aligned=problem.a_aligned and problem.b_aligned)


def rank_configs(problem: GemmProblem, spec: DeviceSpec, ceil: Ceilings | None = None,
                 configs: list[GemmConfig] | None = None, *, tma: bool | None = None) -> list[tuple[float, GemmConfig]]:
    """(predicted seconds, config) for every config that fits, fastest first, ties in space order;
    ``configs`` None = the space's configs for this shape, the TMA kernel's where ``tma`` (None: where
    ``problem_tma`` says it can run with A row-major)."""
    ceil = ceil or _spec_entry(spec)[2]
    if configs is None:
        configs = _shape_configs(problem, spec, tma)
    return [(s, c) for s, _, _, c in _scored(problem, spec, ceil, configs)]


def _shape_configs(problem: GemmProblem, spec: DeviceSpec, tma: bool | None) -> list[GemmConfig]:
    """The space's configs for this shape, the TMA kernel's where ``tma`` (None: ``problem_tma``)."""
    tma = problem_tma(problem) if tma is None else tma
    return configs_for_shape(config_space(spec, problem.dtype), problem.m, problem.n, problem.k, tma=tma)


def _scored(problem: GemmProblem, spec: DeviceSpec, ceil: Ceilings,
            configs: list[GemmConfig]) -> list[tuple[float, float, int, GemmConfig]]:
    """(call seconds, GPU seconds, space index, config) of the configs that fit, fastest call first;
    configs tied on the host launch floor are ordered by their GPU time, then by space order."""
    scored = []
    for i, c in enumerate(configs):
        est = estimate(problem, c, spec, ceil)
        if math.isfinite(est.seconds):
            scored.append((est.seconds, est.parts.get("gpu", est.seconds), i, c))
    return sorted(scored, key=lambda t: t[:3])


def choose(problem: GemmProblem, spec: DeviceSpec, ceil: Ceilings, *, tma: bool | None = None,
           graphed: bool = False, library_adds_residual: bool = False) -> GemmChoice:
    """The fastest predicted Triton config for ``problem`` (classic or, where ``tma``, the persistent
    TMA kernel: see ``rank_configs``) and the backend (uncached; ``select_gemm`` caches it). The
    library is chosen when its predicted time, its fused epilogue pass included
    (``polyrec.perfmodel.gemm_library.fused_pass_seconds``), is lower: a call's time (its host launch
    floor included), or with ``graphed`` (a call captured into a CUDA graph, replayed without its
    host work) its GPU time. ``library_adds_residual``: the library path adds the residual epilogue
    itself (``library_call_seconds``' ``adds_residual``)."""
    rated = rate_dtype(problem.dtype, spec)
    if not (ceil.matmul_flops[rated].value and spec.peak_flops[rated] and spec.boost_clock_hz):
        fallback = configs_for_shape(config_space(spec, problem.dtype), problem.m, problem.n, problem.k, tma=False)[0]
        return GemmChoice(backend="library", config=fallback, triton_seconds=math.inf, library_seconds=math.inf)
    ranked = _scored(problem, spec, ceil, _shape_configs(problem, spec, tma))
    if not ranked:
        raise RuntimeError(f"select_gemm: no config of the {spec.name} space fits {problem}")
    seconds, gpu, _, config = ranked[0]
    library, library_gpu = library_call_seconds(problem, spec, ceil, pass_partial_rows(problem.m),
                                               adds_residual=library_adds_residual)
    if graphed:
        backend = "library" if library_gpu <= gpu else "triton"
    else:
        backend = "library" if (library, library_gpu) <= (seconds, gpu) else "triton"
    return GemmChoice(backend=backend, config=config, triton_seconds=seconds, library_seconds=library,
                      gpu_seconds=library_gpu if backend == "library" else gpu)


def select_gemm(m: int, n: int, k: int, dtype: str, spec: DeviceSpec, *, epilogue: str = "none",
                out_bytes: int = 0, a_aligned: bool | None = None, b_aligned: bool | None = None,
                b_k_major: bool = False, a_row_major: bool = True, tma: bool = True,
                graphed: bool = False, library_adds_residual: bool = False) -> GemmChoice:
    """Triton config and backend for C[m, n] = A[m, k] @ B[k, n] on ``spec``; no timed runs.

    ``epilogue`` is one of "none", "bias", "relu", "bias_relu", "cross", "residual", "cross_grad"
    (``polyrec.kernels.gemm.epilogue_name``); ``out_bytes`` the output
    element size (0 = as the inputs); ``a_aligned`` / ``b_aligned`` whether each operand's loads
    vectorize (``polyrec.perfmodel.gemm.operand_alignment``; None = every size a multiple of 16);
    ``b_k_major`` whether B is stored K-major (the forward ``x @ Wᵀ``: ``GemmProblem.b_k_major``);
    ``a_row_major`` whether A is (False for the wgrad's Aᵀ: the persistent TMA kernel needs a
    row-major A); ``tma`` False keeps the TMA kernel out whatever the sizes say (``matmul`` passes
    whether the actual tensors suit TMA descriptors). The TMA kernel is a candidate only where
    ``polyrec.kernels.gemm_configs.tma_runs`` holds. ``graphed``: the call is being captured into a
    CUDA graph, so the backend is chosen by GPU time (``choose``). ``library_adds_residual``: the
    residual epilogue's storage is the call's to overwrite, so the library path adds it in place
    (``polyrec.kernels.gemm.matmul``'s ``overwrite_residual``) with no pass.
    Deterministic; cached per (device, dtype, bucketed shape, epilogue, alignment, B's layout,
    whether the TMA kernel can run).
    Without a GPU target (the CPU), the Triton interpreter runs ``INTERPRETER_CONFIG`` when
    ``TRITON_INTERPRET`` is set, otherwise the library (torch) runs the GEMM.
    """
    _check(m, n, k, dtype, epilogue)  # before the cache: a bucket holds sizes below 1 too
    entry = _SPECS.get(id(spec)) or _spec_entry(spec)
    if a_aligned is None or b_aligned is None:
        every = m % ALIGNMENT_ELEMENTS == 0 and n % ALIGNMENT_ELEMENTS == 0 and k % ALIGNMENT_ELEMENTS == 0
        a_aligned = every if a_aligned is None else a_aligned
        b_aligned = every if b_aligned is None else b_aligned
    tma = tma and tma_runs(n, k, dtype, epilogue=epilogue, out_bytes=out_bytes, a_row_major=a_row_major,
                           aligned=a_aligned and b_aligned)
    library_adds_residual = library_adds_residual and epilogue == "residual"
    key = (entry[1], dtype, bucket(m), bucket(n), bucket(k), epilogue, out_bytes, a_aligned, b_aligned, b_k_major, tma,
           graphed, library_adds_residual)
    choice = _CACHE.get(key)
    if choice is not None:
        return choice
    if spec.triton is None:
        backend = "triton" if interpreting() else "library"
        choice = GemmChoice(backend=backend, config=INTERPRETER_CONFIG, triton_seconds=math.inf,
                            library_seconds=math.inf)
    else:
        problem = GemmProblem(m=key[2], n=key[3], k=key[4], dtype=dtype, out_bytes=out_bytes, epilogue=epilogue,
                              a_aligned=a_aligned, b_aligned=b_aligned, b_k_major=b_k_major)
        choice = choose(problem, spec, entry[2], tma=tma, graphed=graphed, library_adds_residual=library_adds_residual)
    _CACHE[key] = choice
    return choice


def select_gemm_config(m: int, n: int, k: int, dtype: str, spec: DeviceSpec, *, epilogue: str = "none",
                       out_bytes: int = 0, a_aligned: bool | None = None,
                       b_aligned: bool | None = None, b_k_major: bool = False, a_row_major: bool = True,
                       tma: bool = True) -> GemmConfig:
    """The Triton config ``select_gemm`` predicts fastest (whatever the backend choice)."""
    return select_gemm(m, n, k, dtype, spec, epilogue=epilogue, out_bytes=out_bytes, a_aligned=a_aligned,
                       b_aligned=b_aligned, b_k_major=b_k_major, a_row_major=a_row_major, tma=tma).config


def clear_cache() -> None:
    """Forget every cached selection (tests; a new calibration)."""
    _CACHE.clear()
    _SPECS.clear()
    DISPATCH.clear()
