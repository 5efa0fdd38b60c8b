"""benchmarks/radix_sort_probe.py: its radix sort is stable and carries the payload (interpreter), so the
probe's timings compare equal work."""

from __future__ import annotations

import os

import pytest
import torch

from benchmark_util import load_benchmark

probe = load_benchmark("radix_sort_probe")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs Triton kernels through TRITON_INTERPRET=1")
@pytest.mark.parametrize("cfg", [(7, 256, 32, 1), (10, 128, 32, 4), (8, 64, 64, 2)])
def test_radix_sort_equals_a_stable_sort_with_its_payload(cfg):
    """Many duplicate keys (ties keep their input order), keys with bits in every pass and a last block
    shorter than the others."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.cat([torch.randint(0, 50, (700,), generator=gen),
                      torch.randint(0, 2**27, (601,), generator=gen)]).to(torch.int32)
    payload = torch.randperm(keys.numel(), generator=gen).to(torch.int32)
    out_keys, out_pay = probe.radix_sort(keys, payload, 27, cfg)
    ref_keys, perm = torch.sort(keys, stable=True)
    assert torch.equal(out_keys, ref_keys)
    assert torch.equal(out_pay, payload[perm])
