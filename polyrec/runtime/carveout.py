"""Vendor-library matmuls that leave some SMs free while a collective runs beside them.

cuBLAS's Hopper GEMMs are persistent: one CTA per SM, each looping over output tiles. When NCCL's
kernels hold some SMs, the CTAs that find no free SM wait for a second wave and the GEMM can take up
to twice as long (pytorch/pytorch#143988 describes it for FSDP on H100). On the 2-GPU MLPerf step,
the cross network's weight-gradient GEMMs beside the embedding gradient's all-to-all took 0.46-0.56
ms against 0.28-0.30 alone (docs/distributed.md, twelfth session). torch's experimental SM carveout
(``torch._C._set_sm_carveout_experimental``, torch >= 2.7) asks cuBLASLt for a kernel sized to the
SMs left; in torch 2.11 only the cuBLASLt path reads it, so the window also prefers that library
(hipBLASLt on ROCm, where the carveout is a CU-masked stream).

The setting is process-global and read when the host issues each matmul: ``leave_sms`` sets it,
``LibraryCarveout.restore`` puts back what was there, so only the GEMMs issued in between run on
fewer SMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: SMs the library GEMMs leave to the embedding gradient's all-to-all while it crosses (0: off).
GRADIENT_EXCHANGE_SMS = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class LibraryCarveout:
    """A carveout in force; ``restore`` puts back the setting and library it replaced."""

    previous_sms: int | None
    previous_library: torch._C._BlasBackend

    def restore(self) -> None:
        torch._C._set_sm_carveout_experimental(self.previous_sms)
        torch.backends.cuda.preferred_blas_library(self.previous_library)


def leave_sms(sms: int, device: torch.device) -> LibraryCarveout | None:
    """Make the library matmuls issued from now on leave ``sms`` SMs of ``device`` free; None where
    there is nothing to do (``sms`` 0, a CPU device)."""
    if sms < 0:
        raise ValueError(f"leave_sms: sms must be >= 0, got {sms}")
    if sms == 0 or device.type != "cuda":
        return None
    count = torch.cuda.get_device_properties(device).multi_processor_count
    if sms >= count:
        raise ValueError(f"leave_sms: {sms} SMs is not below the {count} of {device}")
    carveout = LibraryCarveout(previous_sms=torch._C._get_sm_carveout_experimental(),
                               previous_library=torch.backends.cuda.preferred_blas_library())
    torch.backends.cuda.preferred_blas_library("cublaslt")
    torch._C._set_sm_carveout_experimental(sms)
    return carveout
