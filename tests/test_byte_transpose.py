"""byte_transpose.transpose: the Triton kernel through the interpreter (on a GPU machine with TRITON_INTERPRET
unset: compiled, on the GPU), against torch's transpose, bit for bit, with the output poisoned to catch unwritten
elements; one- and two-byte elements."""

import pytest
import torch
from compile_util import COMPILE_DEVICES, compile_only, unfit_jobs

from polyrec.kernels import byte_transpose
from polyrec.kernels.byte_transpose import BLOCK, compile_jobs, transpose
from polyrec.kernels.interpreter import interpreting

#: The interpreter on the CPU; on a GPU machine (TRITON_INTERPRET unset) the compiled kernel.
DEVICE = "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"
#: Bits of each element size that no input takes (inputs are drawn below them): every byte 0xFF.
POISON = {1: 255, 2: 65535}
BITS = {1: torch.uint8, 2: torch.int16}


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty as the module calls it, filled with every byte 0xFF."""
    real = torch.empty

    def empty(*args, **kwargs):
        out = real(*args, **kwargs)
        out.view(torch.uint8).fill_(255)
        return out

    monkeypatch.setattr(byte_transpose.torch, "empty", empty)


@pytest.mark.skipif(DEVICE == "cpu" and not interpreting(), reason="needs TRITON_INTERPRET=1 or a GPU")
@pytest.mark.parametrize("shape", [(1, 1), (BLOCK, BLOCK), (BLOCK - 1, BLOCK + 1), (2 * BLOCK + 5, 7), (3, 2 * BLOCK + 9),
                                   (512, 3456)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16])
def test_transpose_matches_torch_bit_for_bit(shape, dtype, poisoned_empty):
    size = dtype.itemsize
    gen = torch.Generator().manual_seed(shape[0] * 1000 + shape[1])
    bits = torch.randint(0, POISON[size], shape, generator=gen, dtype=torch.int32).to(BITS[size])
    x = bits.view(dtype).to(DEVICE)
    y = transpose(x)
    assert y.dtype == dtype and y.shape == (shape[1], shape[0]) and y.is_contiguous()
    assert torch.equal(y.view(BITS[size]).cpu(), bits.t().contiguous())


def test_empty_matrices():
    for shape in ((0, 5), (4, 0)):
        for dtype in (torch.float8_e4m3fn, torch.bfloat16):
            y = transpose(torch.empty(shape, dtype=dtype))
            assert y.shape == (shape[1], shape[0])


@pytest.mark.parametrize("x, what", [
    (torch.zeros(2, 3, 4, dtype=torch.uint8), "2-D"),
    (torch.zeros(4, 6, dtype=torch.uint8)[:, ::2], "contiguous"),
    (torch.zeros(4, 6, dtype=torch.float32), "one- or two-byte"),
])
def test_rejects_what_it_cannot_transpose(x, what):
    with pytest.raises(ValueError, match=what):
        transpose(x)


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(compile_jobs, name)
    assert not failures, "\n".join(failures)
