"""Reference ops for the poison tests, each with outputs one poison can match: whether x > 0 (bool), x * 64
saturated to int8, and log x (NaN where x < 0)."""

import torch

SHAPES = [(1,), (1000,), (4097,)]


def make_inputs(shape, generator):
    return (torch.randn(shape, generator=generator),)


def is_positive(x):
    return x > 0


def saturate(x):
    return (x * 64).clamp(-128, 127).to(torch.int8)  # x * 64 >= 127 for x >= 1.98: ~2.4 % of the elements are 127


def logarithm(x):
    return torch.log(x)  # NaN for the negative half of the elements
