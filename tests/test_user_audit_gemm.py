"""A user's audit of the public GEMM API (``matmul``, ``epilogue_pass``, ``GemmConfig``) and of
``polyrec hw compile-check``: each test is a misuse that ended in a wrong result or a traceback deep in
Triton, now refused with a message naming the argument."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from compile_util import compile_only
from polyrec.cli import app
from polyrec.hardware.compile import CompileJob
from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_epilogue import epilogue_pass
from polyrec.kernels.gemm_layers import cross_linear, linear

INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs the Triton interpreter (TRITON_INTERPRET=1)")
TILE = {"block_m": 16, "block_n": 16, "block_k": 16, "group_m": 2, "num_warps": 4, "num_stages": 2}


@pytest.mark.parametrize("bad", [{"group_m": 0}, {"split_k": 0}, {"num_stages": 0}, {"block_m": 24},
                                 {"block_n": 0}, {"block_k": 8}, {"num_warps": 3}])
def test_a_config_no_kernel_can_run_is_refused(bad):
    """Was: group_m=0 returned a wrong product without an error (max error 6.8 on a [17, 33] x [33, 5]
    fp32 GEMM); split_k=0 divided by zero; block_m=24 and num_warps=3 failed inside Triton."""
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"GemmConfig: {name} must be"):
        GemmConfig(**(TILE | bad))


@needs_interpreter
def test_the_smallest_config_still_computes_the_product():
    a, b = torch.randn(17, 33), torch.randn(33, 5)
    out = matmul(a, b, config=GemmConfig(**(TILE | {"block_m": 1, "block_n": 1, "split_k": 3})))
    assert (out.double() - reference_matmul(a, b)).abs().max() < 1e-4


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_an_unsupported_input_dtype_is_named_as_the_inputs(dtype):
    """Was: "out_dtype torch.float64 is not supported" for a call that passed no out_dtype
    (``linear`` on float64 tensors said the same)."""
    with pytest.raises(TypeError, match=f"matmul: input dtype {dtype} is not supported"):
        matmul(torch.ones(4, 8, dtype=dtype), torch.ones(8, 4, dtype=dtype))


@needs_interpreter
@pytest.mark.parametrize("which", ["a", "b", "bias"])
def test_matmul_refuses_inputs_that_want_a_gradient(which):
    """Was: the Triton path returned a product with no autograd graph (the weight's gradient silently
    None) while the library path recorded one; ``linear`` is the differentiable layer."""
    args = {"a": torch.randn(5, 7), "b": torch.randn(7, 3), "bias": torch.randn(3)}
    args[which].requires_grad_()
    with pytest.raises(ValueError, match=f"matmul: {which} requires a gradient"):
        matmul(args["a"], args["b"], bias=args["bias"])
    with torch.no_grad():
        assert matmul(args["a"], args["b"], bias=args["bias"]).shape == (5, 3)
    weight = torch.randn(3, 7, requires_grad=True)
    linear(torch.randn(5, 7), weight, activation="relu").sum().backward()
    assert weight.grad is not None


@needs_interpreter
@pytest.mark.parametrize("layer", ["linear", "cross_linear"])
def test_a_second_derivative_of_the_layers_is_refused_by_torch(layer):
    """Was: under ``create_graph=True`` the backward's GEMMs recorded no graph, so x's gradient came back
    without one (``requires_grad`` False): a second derivative (a gradient penalty) lost its terms in silence."""
    x = torch.randn(5, 4, requires_grad=True)
    if layer == "linear":
        y = linear(x, torch.randn(3, 4, requires_grad=True), torch.randn(3, requires_grad=True), activation="relu")
    else:
        y = cross_linear(torch.randn(5, 3), x, torch.randn(5, 3), torch.randn(3, 4), torch.randn(3))
    (gx,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
        gx.sum().backward()


def test_a_triton_config_on_the_cpu_without_the_interpreter_is_refused():
    """Was: "RuntimeError: 0 active drivers ([]). There should only be one." from Triton's driver."""
    script = ("import torch\nfrom polyrec.kernels.gemm import matmul\nfrom polyrec.kernels.gemm_configs import "
              "GemmConfig\na, b = torch.randn(17, 33), torch.randn(33, 5)\nassert matmul(a, b, library=True).shape == "
              "(17, 5)\nmatmul(a, b, config=GemmConfig(block_m=16, block_n=16, block_k=16))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "ValueError: matmul: a Triton config runs on a CUDA / ROCm GPU, or on the CPU with TRITON_INTERPRET=1" \
        in done.stderr, done.stderr[-2000:]


@needs_interpreter
def test_cross_must_be_a_pair():
    """Was: a third tensor ignored on the library path, "too many values to unpack" on the Triton one."""
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    x = torch.randn(5, 3)
    with pytest.raises(ValueError, match=r"matmul: cross must be the pair \(x0, x\), got 3 tensors"):
        matmul(a, b, cross=(x, x, x))
    with pytest.raises(ValueError, match=r"epilogue_pass: cross must be the pair \(x0, x\), got 1 tensors"):
        epilogue_pass(x, cross=(x,))


@needs_interpreter
@pytest.mark.parametrize("what", ["bias", "x0"])
def test_epilogue_pass_refuses_a_tensor_on_another_device(what):
    """Was: not checked; the pass handed the kernel a pointer it cannot read (here: "Cannot copy out of meta
    tensor" from the interpreter; on a GPU, a CPU bias's address)."""
    y = torch.randn(5, 3)
    far = {"bias": torch.randn(3, device="meta"), "x0": torch.randn(5, 3, device="meta")}[what]
    kwargs = {"bias": far} if what == "bias" else {"cross": (far, torch.randn(5, 3))}
    with pytest.raises(ValueError, match=f"epilogue_pass: .*{what} must be .* on cpu, got .* on meta"):
        epilogue_pass(y, **kwargs)


@needs_interpreter
def test_epilogue_pass_refuses_an_integer_output():
    """Was: the epilogue's result truncated into an int32 ``out`` (max error 0.99) without an error."""
    y = torch.randn(5, 3)
    with pytest.raises(TypeError, match="epilogue_pass: out must be a floating-point tensor, got torch.int32"):
        epilogue_pass(y, bias=torch.randn(3), out=torch.empty(5, 3, dtype=torch.int32))
    with pytest.raises(TypeError, match="epilogue_pass: y must be a floating-point tensor, got torch.int64"):
        epilogue_pass(torch.ones(5, 3, dtype=torch.int64))


def warps3_jobs(spec) -> list[CompileJob]:
    """A --kernel whose one job Triton cannot compile (3 warps: not a power of two)."""
    from triton_kernels import scale_kernel

    return [CompileJob(label="scale w3", kernel=scale_kernel, num_warps=3,
                       signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 512})]


@compile_only
def test_compile_check_names_a_job_that_does_not_compile(monkeypatch):
    """Was: Triton's AssertionError as a full traceback."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = CliRunner().invoke(app, ["hw", "compile-check", "-k", "test_user_audit_gemm:warps3_jobs", "-d", "H200"])
    assert result.exit_code == 2, result.output
    assert "scale w3 does not compile for H200 (cuda:90): AssertionError: num_warps must be a power of 2" \
        in result.output


@needs_interpreter
def test_a_second_derivative_of_the_cross_network_is_refused_by_torch():
    """As the layers above: the cross network's backward runs Triton passes and GEMMs that record no graph, so a
    second derivative would lose its terms (or stop inside matmul's own check); torch now refuses it by name."""
    from polyrec.kernels.dcn import cross_network

    x0 = torch.randn(5, 16, requires_grad=True)
    vs, us, bs = [torch.randn(4, 16) * 0.1], [torch.randn(16, 4) * 0.1], [torch.randn(16) * 0.1]
    y = cross_network(x0, vs, us, bs)
    (gx,) = torch.autograd.grad((y * y).sum(), x0, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
        gx.sum().backward()
