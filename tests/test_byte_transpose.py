"""transpose_bytes (polyrec.kernels.byte_transpose): the Triton kernel through the interpreter, against
torch's transpose, bit for bit, with the output poisoned to catch unwritten elements."""

import pytest
import torch
from compile_util import COMPILE_DEVICES, compile_only, unfit_jobs

from polyrec.kernels import byte_transpose
from polyrec.kernels.byte_transpose import BLOCK, compile_jobs, transpose_bytes
from polyrec.kernels.interpreter import interpreting

POISON = 255  # no input byte takes it (inputs are drawn from 0..254)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty as the module calls it, filled with POISON."""
    real = torch.empty

    def empty(*args, **kwargs):
        out = real(*args, **kwargs)
        out.view(torch.uint8).fill_(POISON)
        return out

    monkeypatch.setattr(byte_transpose.torch, "empty", empty)


@pytest.mark.skipif(not interpreting(), reason="the kernel runs through the Triton interpreter (TRITON_INTERPRET=1)")
@pytest.mark.parametrize("shape", [(1, 1), (BLOCK, BLOCK), (BLOCK - 1, BLOCK + 1), (2 * BLOCK + 5, 7), (3, 2 * BLOCK + 9)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2])
def test_transpose_matches_torch_bit_for_bit(shape, dtype, poisoned_empty):
    gen = torch.Generator().manual_seed(shape[0] * 1000 + shape[1])
    bits = torch.randint(0, POISON, shape, generator=gen, dtype=torch.uint8)
    x = bits.view(dtype)
    y = transpose_bytes(x)
    assert y.dtype == dtype and y.shape == (shape[1], shape[0]) and y.is_contiguous()
    assert torch.equal(y.view(torch.uint8), bits.t().contiguous())


def test_empty_matrices():
    for shape in ((0, 5), (4, 0)):
        y = transpose_bytes(torch.empty(shape, dtype=torch.float8_e4m3fn))
        assert y.shape == (shape[1], shape[0])


@pytest.mark.parametrize("x, what", [
    (torch.zeros(2, 3, 4, dtype=torch.uint8), "2-D"),
    (torch.zeros(4, 6, dtype=torch.uint8)[:, ::2], "contiguous"),
    (torch.zeros(4, 6, dtype=torch.bfloat16), "one-byte"),
])
def test_rejects_what_it_cannot_transpose(x, what):
    with pytest.raises(ValueError, match=what):
        transpose_bytes(x)


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(compile_jobs, name)
    assert not failures, "\n".join(failures)
