"""``polyrec.runtime.carveout``: what it refuses and where it does nothing (the GPU effect is measured
by benchmarks/multi_gpu.py --carveout)."""

from __future__ import annotations

import pytest
import torch

from polyrec.runtime.carveout import leave_sms


def test_nothing_to_leave_on_a_cpu_or_for_zero_sms():
    assert leave_sms(0, torch.device("cpu")) is None
    assert leave_sms(16, torch.device("cpu")) is None
    assert torch._C._get_sm_carveout_experimental() is None


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="sms must be >= 0, got -1"):
        leave_sms(-1, torch.device("cpu"))
