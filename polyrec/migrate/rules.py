"""The hazard catalog: stable IDs, severity, explanation and fix for every rule the scanner knows.

IDs are stable: PM1xx are CUDA/C++ and Triton-launch hazards, PM2xx are Python/runtime hazards. A rule
is never renumbered; a retired rule keeps its ID reserved. Things that already work on ROCm are not
rules (``torch.cuda.*`` device APIs, ``torch.cuda.nvtx``, the ``"nccl"`` backend name, ``device="cuda"``).
"""

from __future__ import annotations

from polyrec.migrate.types import Rule, Severity

#: Bytes of LDS one workgroup may use on CDNA3 (gfx942: MI300X, MI325X). Source: AMD CDNA3 ISA
#: reference guide, "Local Data Share" (64 KiB per CU); ROCm "GPU hardware specifications" table,
#: https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html
LDS_BYTES_GFX942 = 64 * 1024
#: Bytes of LDS per workgroup on CDNA4 (gfx950: MI350X, MI355X). Source: same ROCm table (160 KiB).
LDS_BYTES_GFX950 = 160 * 1024
#: Work-items per workgroup on AMD Instinct GPUs (``hipDeviceProp_t::maxThreadsPerBlock``). Source:
#: HIP programming guide, hardware implementation; 16 wavefronts of 64.
AMD_MAX_WORKGROUP = 1024
#: Threads per wavefront on CDNA (gfx9xx). Source: CDNA3 ISA guide, "wave64".
AMD_WAVEFRONT = 64

_HIP_WARP = "HIP programming guide, 'Warp cross-lane functions' (64-bit masks, warpSize 64 on CDNA): " \
            "https://rocm.docs.amd.com/projects/HIP/en/latest/how-to/hip_cpp_language_extensions.html"
_C10_WARP = "PyTorch c10/macros/Macros.h: C10_WARP_SIZE is 64 under USE_ROCM (real fix pattern)"
_HIP_FP8 = "ROCm/clr hipamd/include/hip/amd_detail/amd_hip_fp8.h: HIP_FP8_TYPE_OCP is 0 in gfx942 device code, " \
           "1 in gfx950 device code; ROCm 'Data types and precision support': " \
           "https://rocm.docs.amd.com/en/latest/reference/precision-support.html"
_TORCH_FP8 = "PyTorch dtypes float8_e4m3fnuz / float8_e5m2fnuz (added for MI300); vLLM's " \
             "current_platform.fp8_dtype() picks fnuz on gfx942 (real fix pattern)"

RULES: dict[str, Rule] = {r.id: r for r in (
    Rule(id="PM101", name="warp-size-32", severity=Severity.ERROR, languages=("cuda", "python"),
         summary="Hard-coded warp size 32 or lane arithmetic that assumes it",
         explanation="AMD CDNA GPUs run 64-wide wavefronts. Code that hard-codes 32 threads per warp "
                     "(WARP_SIZE 32, tid % 32, tid >> 5, blockDim.x / 32, reductions that start at offset 16, "
                     "num_warps * 32) computes wrong lane/warp indices and skips half of each wavefront.",
         fix="Use warpSize (device) or a per-platform constant (64 on ROCm, as PyTorch's C10_WARP_SIZE); "
             "start shuffle reductions at warpSize / 2; in Python read the target's warp size.",
         sources=(_HIP_WARP, _C10_WARP)),
    Rule(id="PM102", name="lane-mask-32bit", severity=Severity.ERROR, languages=("cuda",),
         summary="32-bit lane mask in __shfl*_sync / __ballot_sync / __activemask",
         explanation="A wavefront has 64 lanes, so lane masks are 64-bit on AMD. 0xffffffff names only "
                     "lanes 0-31, and storing __ballot_sync / __activemask in a 32-bit integer drops "
                     "lanes 32-63 (HIP's *_sync builtins require a 64-bit mask type).",
         fix="Use a 64-bit mask (0xffffffffffffffffull or __activemask()) held in unsigned long long / "
             "uint64_t, and __popcll / __ffsll on it.",
         sources=(_HIP_WARP,)),
    Rule(id="PM103", name="inline-ptx", severity=Severity.ERROR, languages=("cuda", "python"),
         summary="Inline PTX assembly (asm() in CUDA, tl.inline_asm_elementwise with PTX)",
         explanation="PTX is NVIDIA's virtual ISA; HIP-Clang and Triton's AMD backend cannot compile it.",
         fix="Replace with a portable intrinsic or Triton op, or guard it with #ifdef USE_ROCM / "
             "torch.version.hip and add an AMDGCN or portable path.",
         sources=("NVIDIA PTX ISA; HIP porting guide, 'Inline assembly' (not portable)",)),
    Rule(id="PM104", name="cutlass-cute", severity=Severity.ERROR, languages=("cuda",),
         summary="CUTLASS / CuTe use",
         explanation="CUTLASS and CuTe target NVIDIA tensor cores (mma.sync, wgmma, TMA) and have no HIP "
                     "build.",
         fix="Port the kernel to Triton (polyrec migrate port) or to AMD's Composable Kernel.",
         sources=("https://github.com/NVIDIA/cutlass (NVIDIA-only)",)),
    Rule(id="PM105", name="cub", severity=Severity.NOTE, languages=("cuda",),
         summary="CUB use",
         explanation="CUB is NVIDIA's; hipCUB offers the same API on ROCm (hipify maps the header and "
                     "the cub:: namespace), but tuning policies and warp-size-dependent templates differ.",
         fix="hipify to hipCUB and check warp-size template arguments.",
         sources=("https://rocm.docs.amd.com/projects/hipCUB/",)),
    Rule(id="PM106", name="cublaslt", severity=Severity.WARNING, languages=("cuda",),
         summary="cuBLASLt use",
         explanation="cuBLASLt maps to hipBLASLt, whose epilogues, heuristics and fp8 scaling modes are a "
                     "subset and differ per gfx target.",
         fix="hipify to hipBLASLt and check every epilogue / matmul descriptor attribute, or use a Triton "
             "GEMM with a fused epilogue.",
         sources=("https://rocm.docs.amd.com/projects/hipBLASLt/",)),
    Rule(id="PM107", name="cudnn", severity=Severity.WARNING, languages=("cuda",),
         summary="cuDNN use",
         explanation="cuDNN has no drop-in ROCm equivalent; MIOpen has a different API and coverage.",
         fix="Call the op through PyTorch (which dispatches to MIOpen on ROCm) or port to MIOpen.",
         sources=("https://rocm.docs.amd.com/projects/MIOpen/",)),
    Rule(id="PM108", name="static-smem-over-lds", severity=Severity.ERROR, languages=("cuda",),
         summary="Static __shared__ memory above the LDS of MI300X (64 KiB) or MI350X (160 KiB)",
         explanation="A workgroup on gfx942 gets at most 64 KiB of LDS, on gfx950 160 KiB; a kernel that "
                     "declares more does not build for that target.",
         fix="Shrink the tile (per-target tile sizes), or move the buffer to dynamic shared memory sized "
             "from hipDeviceProp_t::sharedMemPerBlock.",
         sources=("ROCm GPU hardware specifications (LDS per CU)",)),
    Rule(id="PM109", name="dynamic-smem-over-lds", severity=Severity.ERROR, languages=("cuda",),
         summary="Dynamic shared memory (attribute or launch argument) above the AMD LDS size",
         explanation="cudaFuncAttributeMaxDynamicSharedMemorySize opt-ins (up to 227 KiB on H100) and "
                     "launches with that much dynamic shared memory fail on gfx942 (64 KiB) and above "
                     "160 KiB on gfx950.",
         fix="Size dynamic shared memory from the device's sharedMemPerBlock and pick tiles to fit.",
         sources=("CUDA programming guide, 'Shared memory' opt-in; ROCm GPU hardware specifications",)),
    Rule(id="PM110", name="triton-num-warps-amd", severity=Severity.ERROR, languages=("python",),
         summary="Triton config with num_warps > 16 (more than 1024 work-items on AMD)",
         explanation="On AMD a Triton warp is a 64-wide wavefront, so num_warps=32 (or a warp-count constant "
                     "such as NUM_WARPS = 32) asks for 2048 work-items per workgroup; the limit is 1024.",
         fix="Cap num_warps at 16 on ROCm (choose the config per target).",
         sources=("Triton AMD backend (warp_size 64); HIP maxThreadsPerBlock 1024",)),
    Rule(id="PM111", name="triton-config-over-lds", severity=Severity.ERROR, languages=("python",),
         summary="Triton config whose compiled LDS / registers do not fit an AMD target",
         explanation="Found by compiling the config for gfx942 / gfx950 with polyrec.hardware.compile: "
                     "the LDS it needs exceeds the device's, or it spills.",
         fix="Choose a smaller tile or fewer stages on that target (polyrec selects configs per device).",
         sources=("polyrec.hardware.compile.compile_for",)),
    Rule(id="PM112", name="cuda-fp8-types", severity=Severity.WARNING, languages=("cuda",),
         summary="cuda_fp8.h OCP fp8 types (__nv_fp8_e4m3 / __nv_fp8_e5m2 and x2/x4, __NV_E4M3 / __NV_E5M2)",
         explanation="hip/hip_fp8.h has twins of the same name and OCP format (__hip_fp8_e4m3...), but device "
                     "code gets them only on gfx950 (MI350X / MI355X). gfx942 (MI300X / MI325X) device code has "
                     "only the FNUZ formats (__hip_fp8_e4m3_fnuz...: exponent bias one higher, no infinity or "
                     "negative zero, e4m3 max 240 not 448), so the same bits mean other numbers there "
                     "(hipify-clang's own tests map __nv_fp8_e4m3 to __hip_fp8_e4m3_fnuz). Scales and clamps "
                     "written for 448 overflow.",
         fix="Choose the type per target (__hip_fp8_e4m3 on gfx950, __hip_fp8_e4m3_fnuz on gfx942, e.g. "
             "behind #if HIP_FP8_TYPE_FNUZ) and take max / scales from it; polyrec migrate hipify translates "
             "these names only for target gfx950.",
         sources=(_HIP_FP8,)),
    Rule(id="PM201", name="fp8-ocp-format", severity=Severity.WARNING, languages=("python",),
         summary="OCP fp8 dtype (float8_e4m3fn / e5m2, tl.float8e4nv) without the fnuz variant",
         explanation="MI300X / MI325X (gfx942) implement the fnuz fp8 formats (float8_e4m3fnuz, "
                     "float8_e5m2fnuz: different bias, no negative zero, max 240 not 448); the OCP formats "
                     "only run natively from gfx950. Scales and clamps written for e4m3fn overflow.",
         fix="Pick the dtype per device (fnuz on gfx942) and take the max from torch.finfo(dtype).",
         sources=(_TORCH_FP8,)),
    Rule(id="PM202", name="device-capability-compare", severity=Severity.WARNING, languages=("python",),
         summary="get_device_capability() / props.major compared as if it were an NVIDIA SM version",
         explanation="On ROCm torch reports the gfx version: (9, 4) on MI300X, (9, 5) on MI350X. Checks "
                     "like >= (9, 0) ('Hopper: use TMA/wgmma') turn on NVIDIA-only paths; == (8, 0) ones "
                     "turn off fast paths.",
         fix="Test the feature or torch.version.hip first, e.g. `if torch.version.hip is None and "
             "torch.cuda.get_device_capability() >= (9, 0)`.",
         sources=("torch.cuda.get_device_capability on ROCm returns gcnArch major/minor",)),
    Rule(id="PM203", name="torch-version-cuda-check", severity=Severity.WARNING, languages=("python",),
         summary="Branching on torch.version.cuda",
         explanation="torch.version.cuda is None on ROCm builds even though torch.cuda works, so "
                     "`if torch.version.cuda:` sends AMD GPUs down the CPU / fallback branch.",
         fix="Use torch.cuda.is_available() for 'has a GPU', or test torch.version.hip as well.",
         sources=("torch.version.hip / torch.version.cuda (PyTorch HIP semantics note)",)),
    Rule(id="PM204", name="nvtx-package", severity=Severity.WARNING, languages=("python",),
         summary="The NVIDIA-only `nvtx` package",
         explanation="nvtx ranges are invisible to ROCm profilers (rocprof / roctracer).",
         fix="Use torch.cuda.nvtx (mapped to roctx on ROCm) or torch.profiler.record_function.",
         sources=("torch.cuda.nvtx on ROCm uses roctx (torch/cuda/nvtx.py)",)),
    Rule(id="PM205", name="nvml", severity=Severity.ERROR, languages=("python",),
         summary="pynvml / nvidia-smi for device queries",
         explanation="NVML and nvidia-smi do not exist on AMD systems: the import or call fails.",
         fix="Use torch.cuda.mem_get_info / get_device_properties, or amdsmi on ROCm.",
         sources=("https://rocm.docs.amd.com/projects/amdsmi/",)),
    Rule(id="PM206", name="cupy-raw-cuda", severity=Severity.ERROR, languages=("python",),
         summary="CuPy RawKernel / RawModule source with CUDA-only intrinsics",
         explanation="CuPy compiles RawKernel source with hiprtc on ROCm; inline PTX, 32-bit lane masks "
                     "and CUDA-only headers in the source do not compile or misbehave there.",
         fix="Make the kernel source portable (64-bit masks, warpSize, no asm) or port it to Triton.",
         sources=("https://docs.cupy.dev/en/stable/install.html#using-cupy-on-amd-gpu-experimental",)),
    Rule(id="PM207", name="cuda-python", severity=Severity.ERROR, languages=("python",),
         summary="NVIDIA cuda-python bindings (cuda.bindings / cuda.core / from cuda import cuda)",
         explanation="cuda-python binds the CUDA driver and NVRTC directly; there is no ROCm build.",
         fix="Use torch.cuda APIs, or hip-python on ROCm behind a platform check.",
         sources=("https://nvidia.github.io/cuda-python/", "https://rocm.docs.amd.com/projects/hip-python/")),
)}


def rule(rule_id: str) -> Rule:
    """The rule with this ID; a clear error for an unknown one."""
    try:
        return RULES[rule_id]
    except KeyError:
        raise KeyError(f"unknown rule {rule_id!r}; known: {', '.join(RULES)}") from None
