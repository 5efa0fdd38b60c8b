"""Edge cases found by an audit of the dense kernels, models, hardware and CLI, each failing before its fix:
empty GEMMs, strided biases, in-place epilogues aliasing an operand, epilogue_pass's ``out``, chunk_copy's
contiguity and chunk count, FusedAdagrad's add_param_group / NaN lr / CPU, JaggedBatch's TorchRec interop
and lengths, model configs with non-positive sizes, empty batches through DLRM, malformed calibration
files, and the CLI's ``hw compile-check --kernel`` / ``bench e2e`` on bad input."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware import get_device
from polyrec.hardware.calibrate import calibration_path, ceilings
from polyrec.kernels import gemm_select
from polyrec.kernels.chunk_copy import chunk_copy
from polyrec.kernels.dense_optim import FusedAdagrad
from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_epilogue import CrossGrad, epilogue_pass
from polyrec.kernels.gemm_layers import linear
from polyrec.kernels.gemm_tma import TmaGemmConfig, gemm_tma
from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.models import DLRM, ModelConfig

interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                 reason="runs Triton kernels on the CPU (TRITON_INTERPRET=1)")
SMALL = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=2)
runner = CliRunner()


@interpreted
@pytest.mark.parametrize("m, n, k", [(0, 8, 8), (8, 0, 8), (8, 8, 0)])
def test_empty_gemm_matches_torch_cold_or_cached(m, n, k):
    a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    gemm_select.clear_cache()  # cold: the selector was asked for M, N or K = 0 and refused
    assert torch.equal(matmul(a, b, bias=bias, activation="relu").double(),
                       reference_matmul(a, b, bias=bias, activation="relu"))
    x, w = torch.randn(m, k), torch.randn(n, k)
    ours = [t.clone().requires_grad_() for t in (x, w, bias)]
    theirs = [t.double().requires_grad_() for t in (x, w, bias)]
    linear(*ours, "relu").sum().backward()
    torch.relu(torch.nn.functional.linear(*theirs)).sum().backward()
    for got, want in zip(ours, theirs):
        torch.testing.assert_close(got.grad.double(), want.grad)


def test_selector_refuses_empty_sizes_even_when_their_bucket_is_cached():
    spec = get_device("H200")
    gemm_select.select_gemm(16, 64, 64, "bf16", spec)  # bucket(0) == bucket(16)
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        gemm_select.select_gemm(0, 64, 64, "bf16", spec)


@interpreted
def test_strided_bias_is_refused_not_misread():
    a, b, bias = torch.randn(17, 29), torch.randn(29, 33), torch.randn(66)[::2]
    for kwargs in ({"config": SMALL}, {}):
        with pytest.raises(ValueError, match=r"bias must be a contiguous \[33\].*stride \(2,\)"):
            matmul(a, b, bias=bias, **kwargs)
    with pytest.raises(ValueError, match="bias must be a contiguous"):
        epilogue_pass(a @ b, bias=bias)
    a, b = torch.randn(32, 64, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bias must be a contiguous"):
        gemm_tma(a, b, b_k_major=False, config=TmaGemmConfig(), bias=torch.randn(64)[::2])


@interpreted
@pytest.mark.parametrize("path", [{"config": SMALL}, {"library": True}, {}])
def test_in_place_epilogue_aliasing_an_operand_is_refused(path):
    a, w = torch.randn(64, 64), torch.randn(64, 64)
    with pytest.raises(ValueError, match="residual .* shares memory with a"):
        matmul(a, w, residual=a, overwrite_residual=True, **path)
    with pytest.raises(ValueError, match="residual .* shares memory with b"):
        matmul(a, w, residual=w[:, :], overwrite_residual=True, **path)
    d_x0 = torch.empty(64, 64)
    with pytest.raises(ValueError, match="cross_grad.d_x0 .* shares memory with a"):
        matmul(d_x0, w, trans_b=True, cross_grad=CrossGrad(grad=torch.randn(64, 64), x0=torch.randn(64, 64),
                                                           d_x0=d_x0), **path)
    separate = torch.randn(64, 64)  # the same call on its own storage still runs
    expected = reference_matmul(a, w) + separate.double()
    assert torch.allclose(matmul(a, w, residual=separate, overwrite_residual=True, **path).double(), expected,
                          atol=1e-4)


@interpreted
def test_epilogue_pass_checks_out_and_y():
    y = torch.randn(4, 4)
    with pytest.raises(ValueError, match=r"out must be \[4, 4\]"):
        epilogue_pass(y, bias=torch.randn(4), out=torch.empty(8, 8))
    with pytest.raises(ValueError, match="y must be 2-D"):
        epilogue_pass(torch.randn(4), bias=torch.randn(4))


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_chunk_copy_refuses_what_its_kernel_would_misread(monkeypatch, interpret):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    x, one = torch.arange(10), torch.tensor([0])
    with pytest.raises(ValueError, match="x must be 1-D and contiguous"):
        chunk_copy(torch.arange(20)[::2], torch.tensor([5, 0]), torch.tensor([0, 3]), 6)
    with pytest.raises(ValueError, match="src_start must be a contiguous 1-D int64"):
        chunk_copy(x, torch.tensor([5, 7, 0, 7])[::2], torch.tensor([0, 3]), 6)
    with pytest.raises(ValueError, match="at least one chunk"):  # read dst_start[0] of nothing: a segfault
        chunk_copy(x, one[:0], one[:0], 4)
    with pytest.raises(ValueError, match="total must be >= 0"):
        chunk_copy(x, one, one, -1)
    assert chunk_copy(x, one[:0], one[:0], 0).numel() == 0


def _adagrad_run(cls, **kwargs) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    gen = torch.Generator().manual_seed(0)
    first, second = torch.nn.Parameter(torch.randn(5, 3, generator=gen)), torch.nn.Parameter(torch.randn(7, generator=gen))
    opt = cls([first], **kwargs)
    opt.add_param_group({"params": [second], "initial_accumulator_value": 0.5, "lr": 0.1})
    for _ in range(3):
        for p in (first, second):
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [first, second], opt


@interpreted
def test_fused_adagrad_add_param_group_matches_torch():
    fused, opt_f = _adagrad_run(FusedAdagrad, lr_decay=0.1)
    plain, opt_t = _adagrad_run(torch.optim.Adagrad, lr_decay=0.1)
    for p, q in zip(fused, plain):
        torch.testing.assert_close(p, q)
        torch.testing.assert_close(opt_f.state[p]["sum"], opt_t.state[q]["sum"])
        assert float(opt_f.state[p]["step"]) == float(opt_t.state[q]["step"]) == 3


def test_fused_adagrad_refuses_nan_and_cpu_without_interpreter(monkeypatch):
    p = torch.nn.Parameter(torch.randn(4))
    with pytest.raises(ValueError, match="must be >= 0, got nan"):
        FusedAdagrad([p], lr=float("nan"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    p.grad = torch.ones(4)
    with pytest.raises(ValueError, match="must be on a CUDA / ROCm GPU .* on cpu"):
        FusedAdagrad([p]).step()


def test_jagged_kjt_interop_and_lengths_errors():
    batch = JaggedBatch.from_lengths(values=torch.arange(6), lengths=torch.tensor([1, 2, 0, 3]), batch_size=2,
                                     num_features=2)
    with pytest.raises(JaggedBatchError, match="1 keys for 2 features"):
        batch.to_kjt(["a"])
    if importlib.util.find_spec("torchrec") is None:
        with pytest.raises(ImportError, match="to_kjt needs torchrec, an optional extra"):
            batch.to_kjt(["a", "b"])

    class Kjt:  # the parts of a KeyedJaggedTensor from_kjt reads
        def keys(self):
            return ["a", "b"]

    with pytest.raises(JaggedBatchError, match=r"keys \['c'\] are not in the KeyedJaggedTensor"):
        JaggedBatch.from_kjt(Kjt(), keys=["a", "c"])
    with pytest.raises(JaggedBatchError, match="lengths must be int64 or int32, got torch.float32"):
        JaggedBatch.from_lengths(values=torch.arange(6), lengths=torch.tensor([1.5, 2.0, 0.0, 3.0]), batch_size=2,
                                 num_features=2)


def _config(**changes) -> ModelConfig:
    fields = dict(name="t", num_dense=4, table_rows=(10, 20), embedding_dim=8, multi_hot=(1, 2), bottom_mlp=(16, 8),
                  top_mlp=(8, 1), interaction="dcnv2", dcn_layers=1, dcn_rank=4)
    return ModelConfig(**(fields | changes))


@pytest.mark.parametrize("changes, says", [
    ({"bottom_mlp": (0, 8)}, "bottom_mlp sizes must be positive"),
    ({"top_mlp": (-3, 1)}, "top_mlp sizes must be positive"),
    ({"multi_hot": (0, 2)}, "multi_hot sizes must be positive"),
    ({"table_rows": (), "multi_hot": ()}, "needs at least one table"),
])
def test_model_config_refuses_non_positive_sizes(changes, says):
    with pytest.raises(ValueError, match=says):
        _config(**changes)


@pytest.mark.parametrize("backend", [
    "torch", pytest.param("polyrec", marks=interpreted)])
def test_dlrm_takes_an_empty_batch(backend):
    model = DLRM(_config(), embedding_backend=backend)
    features = model.config.num_tables
    for b in (0, 2):
        out = model(torch.randn(b, 4), torch.zeros(b * features, dtype=torch.long), torch.arange(b * features + 1))
        assert out.shape == (b,)


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object, got list"),
    ('{"copy_bandwidth": -5}', "'copy_bandwidth' must be a finite positive number, got -5"),
    ('{"matmul_bf16": "fast"}', "'matmul_bf16' must be a finite positive number, got 'fast'"),
    ('{"matmul_bf16": Infinity}', "'matmul_bf16' must be a finite positive number, got inf"),  # was accepted
])
def test_malformed_calibration_is_an_error_naming_it(text, says):
    spec = get_device("H200")
    path = calibration_path(spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(ValueError, match=says):
        ceilings(spec)


def returns_none(spec):
    """Not a compile-jobs function: it returns nothing."""


@pytest.mark.parametrize("ref, says", [
    ("polyrec.kernels.gemm:reference_matmul", "cannot be called with one DeviceSpec"),
    ("test_dense_bugs:returns_none", "returned NoneType, not a list of CompileJob"),
])
def test_compile_check_of_a_function_that_gives_no_jobs_is_a_clear_error(monkeypatch, ref, says):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, ["hw", "compile-check", "-d", "H200", "-k", ref])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def test_bench_e2e_checks_its_options_before_measuring(monkeypatch):
    from polyrec.runtime import bench

    monkeypatch.setattr(bench, "e2e", lambda *args, **kwargs: pytest.fail("measured before the checks"))
    for args, says in ((["--synthetic-pool", "-1"], "--synthetic-pool must be 0 or more"),
                       (["--pipeline", "foo"], "pipeline must be sync or semi-sync")):
        result = runner.invoke(app, ["bench", "e2e", "--steps", "1", *args])
        assert result.exit_code == 2 and says in " ".join(result.output.split()), result.output
