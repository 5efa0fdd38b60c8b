"""On the GPU machine: the input distribution's chunk copy and the pooled-output placement, compiled
for the device, against plain torch on fresh random inputs (the CPU tests run them interpreted)."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.chunk_copy import chunk_copy
from polyrec.kernels.place_columns import column_layout, gather, place

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_chunk_copy_matches_torch_on_the_gpu(dtype):
    gen = torch.Generator(device="cuda").manual_seed(7)
    n, chunks = 1_000_003, 53
    x = torch.randint(0, 2**30, (n,), device="cuda", generator=gen).to(dtype)
    sizes = torch.randint(0, 2 * n // chunks, (chunks,), device="cuda", generator=gen)
    sizes[5] = 0
    src = (torch.rand(chunks, device="cuda", generator=gen) * (n - sizes)).long()
    dst = torch.cumsum(sizes, 0) - sizes
    total = int(sizes.sum())
    pos = torch.arange(total, device="cuda")
    chunk = torch.searchsorted(dst, pos, right=True) - 1
    assert torch.equal(chunk_copy(x, src, dst, total), x[src[chunk] + pos - dst[chunk]])


@pytest.mark.parametrize("add", [False, True])
def test_place_and_gather_match_torch_on_the_gpu(add):
    b, dims, out_dim = 4099, [96, 160], 256
    gen = torch.Generator().manual_seed(3)
    if add:  # both ranks hold partial sums of every column
        cols = [torch.randperm(out_dim, generator=gen)[:d].tolist() for d in (out_dim, out_dim)]
        dims = [out_dim, out_dim]
    else:
        perm = torch.randperm(out_dim, generator=gen).tolist()
        cols = [perm[:dims[0]], perm[dims[0]:]]
    layout = column_layout(dims, cols, out_dim, add, "cuda")
    flat = torch.randn(b * sum(dims), device="cuda", dtype=torch.bfloat16)
    want = torch.zeros(b, out_dim, device="cuda", dtype=torch.float32)
    for block, c, d in zip(flat.split([b * d for d in dims]), cols, dims):
        want[:, c] += block.view(b, d).float()
    got = place(flat, b, layout)
    torch.testing.assert_close(got.float(), want.to(torch.bfloat16).float(), rtol=0, atol=0)
    grad = torch.randn(b, out_dim, device="cuda", dtype=torch.bfloat16)
    want_back = torch.cat([(grad[:, c].float() * 0.5).to(torch.bfloat16).reshape(-1) for c in cols])
    assert torch.equal(gather(grad, b, layout, 0.5), want_back)
