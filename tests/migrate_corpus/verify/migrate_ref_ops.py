"""Reference op for the verify tests: out = 2 x + y (fp32), with odd sizes and a size-1 edge case."""

import torch

SHAPES = [(1,), (1000,), (4097,)]  # one element, below one block, several blocks with a ragged tail


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))


def axpy(x, y):
    return 2.0 * x + y
