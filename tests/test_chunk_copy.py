"""chunk_copy (polyrec.kernels.chunk_copy) against a plain Python reading, through the Triton
interpreter and through the torch path used where Triton cannot run."""

import pytest
import torch
from compile_util import COMPILE_DEVICES, compile_only, unfit_jobs

from polyrec.kernels.chunk_copy import BLOCK, chunk_copy, compile_jobs


def _reference(x: list, src: list[int], dst: list[int], total: int) -> list:
    out = []
    for c, (s0, d0) in enumerate(zip(src, dst)):
        end = dst[c + 1] if c + 1 < len(dst) else total
        out += x[s0: s0 + end - d0]
    return out


def _case(seed: int, chunks: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Random chunks of a random tensor: empty chunks, repeats of one source range, odd sizes, more
    elements than one program's block."""
    gen = torch.Generator().manual_seed(seed)
    n = 3 * BLOCK + 17
    x = torch.randint(-10**6, 10**6, (n,), generator=gen).to(dtype)
    sizes = torch.randint(0, 2 * BLOCK // chunks + 3, (chunks,), generator=gen)
    src = torch.stack([torch.randint(0, n - int(s), (1,), generator=gen)[0] if s else torch.tensor(0) for s in sizes])
    if chunks >= 3:
        sizes[1] = 0
        src[2], sizes[2] = src[0], sizes[0]  # the same source range twice (a column-wise table's ids go to each shard)
    dst = torch.cumsum(sizes, 0) - sizes
    return x, src, dst, int(sizes.sum())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("chunks", [1, 3, 11, 64, 65])
def test_matches_reference(dtype, chunks):
    x, src, dst, total = _case(chunks, chunks, dtype)
    got = chunk_copy(x, src, dst, total)
    assert got.dtype == dtype and got.shape == (total,)
    assert got.tolist() == _reference(x.tolist(), src.tolist(), dst.tolist(), total)


@pytest.mark.parametrize("torch_path", [False, True])
def test_narrow_moves_int64_ids_as_int32_clamped(torch_path, monkeypatch):
    """``narrow``: the same chunks as int32, ids past int32 clamped to 2^31 - 1 and negatives to -1
    (out of range they stay out of range), through the kernel and the torch path."""
    if torch_path:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, src, dst, total = _case(9, 11, torch.int64)
    x[::5] = 2**40 + torch.arange(x[::5].numel())
    x[1::7] = -(2**35)
    got = chunk_copy(x, src, dst, total, narrow=True)
    want = [min(max(v, -1), 2**31 - 1) for v in _reference(x.tolist(), src.tolist(), dst.tolist(), total)]
    assert got.dtype == torch.int32 and got.tolist() == want
    with pytest.raises(ValueError, match="narrow takes int64"):
        chunk_copy(x.to(torch.int32), src, dst, total, narrow=True)


def test_torch_path_matches_kernel(monkeypatch):
    x, src, dst, total = _case(5, 7, torch.int64)
    kernel = chunk_copy(x, src, dst, total)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert torch.equal(chunk_copy(x, src, dst, total), kernel)


def test_empty_output_and_bad_input():
    x = torch.arange(5)
    assert chunk_copy(x, torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), 0).numel() == 0
    with pytest.raises(ValueError, match="int64"):
        chunk_copy(x, torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="1-D"):
        chunk_copy(x.view(1, 5), torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="source starts"):
        chunk_copy(x, torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), 1)


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(compile_jobs, name)
    assert not failures, "\n".join(failures)
