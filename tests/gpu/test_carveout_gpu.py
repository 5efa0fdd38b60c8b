"""On the GPU machine: a library carveout is set, matmuls under it give the same product, and
``restore`` puts back the setting and the library it replaced."""

from __future__ import annotations

import pytest
import torch

from polyrec.runtime.carveout import leave_sms

pytestmark = pytest.mark.gpu


def test_matmuls_under_a_carveout_equal_those_without_and_the_setting_comes_back():
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(4096, 1024, device="cuda", generator=gen, dtype=torch.bfloat16)
    b = torch.randn(1024, 2048, device="cuda", generator=gen, dtype=torch.bfloat16)
    reference = (a.double() @ b.double())
    library = torch.backends.cuda.preferred_blas_library()
    carveout = leave_sms(16, torch.device("cuda"))
    assert carveout is not None and torch._C._get_sm_carveout_experimental() == 16
    carved = a @ b
    carveout.restore()
    assert torch._C._get_sm_carveout_experimental() is None
    assert torch.backends.cuda.preferred_blas_library() == library
    torch.testing.assert_close(carved.double(), reference, rtol=2e-2, atol=0.5)
    with pytest.raises(ValueError, match="is not below the"):
        leave_sms(10_000, torch.device("cuda"))
