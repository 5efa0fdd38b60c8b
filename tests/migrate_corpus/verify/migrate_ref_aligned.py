"""Reference op for the derived-shapes test: out = 2 x + y (fp32) on block-aligned sizes only."""

import torch

SHAPES = [(256,), (1024,), (4096,)]  # multiples of 256: a port that drops the tail passes on these


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator), torch.randn(shape, generator=generator))


def axpy(x, y):
    return 2.0 * x + y
