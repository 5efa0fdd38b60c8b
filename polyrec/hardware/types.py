"""What polyrec knows about an accelerator: the DeviceSpec and the ceilings the performance model uses.

A DeviceSpec comes from one data file per SKU (``devices/*.toml``, every number with its public
source), from the present device's properties (detect.py), or, for the CPU, from the host.
Units are SI base units throughout: bytes, bytes/s, FLOP/s, Hz, W.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Data types with a peak-throughput entry in every DeviceSpec. ``tf32`` is NVIDIA's TF32 and
#: AMD's XF32 (fp32 inputs rounded in the matrix unit); ``fp32`` is plain IEEE fp32 math.
PEAK_DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

#: AMD targets with a TF32 dot in Triton 3.6: gfx942 (CDNA3's XF32; triton/backends/amd/compiler.py, parse_options,
#: "Enable XF32 (TF32) for CDNA3 GPUs"). gfx950 (CDNA4) has no XF32: Triton refuses "tf32" there.
AMD_TF32_DOT_ARCHS = frozenset({"gfx942"})


@dataclass(frozen=True, kw_only=True, slots=True)
class TritonTarget:
    """Arguments of ``triton.backends.compiler.GPUTarget`` for compiling without the device."""

    backend: str  # "cuda" or "hip"
    arch: int | str  # 90 for sm_90, "gfx942" for CDNA3
    warp_size: int  # threads per warp / wavefront

    @property
    def tf32_dot(self) -> bool:
        """Whether Triton 3.6's ``tl.dot`` takes ``input_precision="tf32"`` here: on every CUDA target, and on
        AMD's in ``AMD_TF32_DOT_ARCHS`` alone."""
        return self.backend == "cuda" or self.arch in AMD_TF32_DOT_ARCHS


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSpec:
    """One accelerator SKU (or the host CPU), with where every number came from."""

    name: str  # catalog key, e.g. "H200"
    full_name: str  # vendor's product name, e.g. "NVIDIA H200 SXM 141GB"
    vendor: str  # "nvidia", "amd" or "cpu"
    arch: str  # "sm_90", "gfx942", ... or "cpu"
    match_names: tuple[str, ...] = ()  # substrings of torch's device name that identify this SKU
    triton: TritonTarget | None = None  # None where Triton does not compile (CPU)
    compute_units: int  # streaming multiprocessors (NVIDIA) / compute units (AMD) / cores (CPU)
    warp_size: int  # threads per warp (32) or wavefront (64); 1 on the CPU
    registers_per_cu: int  # 32-bit registers per SM / CU (AMD: VGPR file, all SIMDs)
    max_registers_per_thread: int  # architectural limit per thread (255 NVIDIA, 512 CDNA3+ unified)
    smem_per_block: int  # bytes of shared memory / LDS one block may use (opt-in maximum)
    smem_per_cu: int  # bytes of shared memory / LDS per SM / CU
    l2_bytes: int  # bytes of last-level on-die cache (L2; AMD: sum over XCDs)
    infinity_cache_bytes: int = 0  # bytes of AMD Infinity Cache (MALL); 0 where absent
    xcd_count: int = 1  # compute chiplets (AMD XCDs); 1 for a monolithic die
    hbm_bytes: int  # bytes of device memory
    hbm_bandwidth: float  # bytes/s, datasheet peak
    peak_flops: dict[str, float]  # dense FLOP/s (int8: OP/s) per dtype in PEAK_DTYPES; 0 = unsupported
    boost_clock_hz: float  # peak engine clock
    scaleup_bandwidth: float  # bytes/s per GPU per direction over NVLink / Infinity Fabric; 0 = none
    host_link_bandwidth: float  # bytes/s per direction over PCIe
    tdp_watts: float  # board power
    sources: dict[str, str] = field(default_factory=dict)  # field (or "peak_flops.bf16") -> source

    @property
    def is_gpu(self) -> bool:
        return self.vendor in ("nvidia", "amd")

    def source_of(self, key: str) -> str:
        """The public source (URL or note) of one number, e.g. ``source_of("peak_flops.bf16")``."""
        return self.sources.get(key, "unknown")


@dataclass(frozen=True, kw_only=True, slots=True)
class Ceiling:
    """One rate the performance model divides by, and where it came from."""

    value: float  # bytes/s, FLOP/s or seconds, as the field that holds it says
    origin: str  # "datasheet", "calibrated <date>" or "estimate: <why>"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ceilings:
    """The measured (or, failing that, datasheet) ceilings of one device."""

    device: str
    copy_bandwidth: Ceiling  # bytes/s, device-to-device copy counting bytes read plus written
    l2_bandwidth: Ceiling  # bytes/s, same count, working set resident in L2
    matmul_flops: dict[str, Ceiling]  # FLOP/s of a large matmul per dtype in MATMUL_DTYPES
    launch_latency: Ceiling  # seconds from one kernel launch to the next, back to back


#: The dtypes ``hw calibrate`` times a matmul in (fp8: e4m3 operands, per-tensor scales, a bf16 output, as
#: the fp8 dense layers' forward GEMMs run: ``polyrec.kernels.fp8.scaled_mm``).
MATMUL_DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp32", "fp8")
