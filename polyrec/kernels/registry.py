"""Kernel modules whose ``compile_jobs(spec)`` every compile check covers (``polyrec hw compile-check``).

Each listed module defines ``compile_jobs(spec: DeviceSpec) -> list[CompileJob]``: the configs its
selector can choose for that device, so that CI proves they all fit every target.
"""

KERNEL_MODULES: tuple[str, ...] = (
    "polyrec.hardware.probes",
    "polyrec.kernels.tbe_compile",
    "polyrec.kernels.gemm_configs",
    "polyrec.kernels.dcn",
    "polyrec.kernels.dense_backward",
    "polyrec.kernels.dense_optim",
    "polyrec.kernels.chunk_copy",
    "polyrec.kernels.place_columns",
    "polyrec.kernels.fp8",
    "polyrec.kernels.byte_transpose",
)
