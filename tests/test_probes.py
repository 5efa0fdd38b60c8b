"""The calibration probe kernels compute what they claim (through the Triton interpreter)."""

from __future__ import annotations

import torch

from polyrec.hardware.probes import l2_read


def test_l2_probe_sums_each_chunk_reps_times(rng):
    x = torch.rand(3 * 256, generator=rng, dtype=torch.float32)
    out = l2_read(x, programs=3, reps=4, block=128)
    expected = 4 * x.double().view(3, 256).sum(dim=1)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_l2_probe_rejects_ragged_chunks():
    import pytest

    with pytest.raises(ValueError, match="multiple of BLOCK"):
        l2_read(torch.rand(300), programs=3, reps=1, block=128)
