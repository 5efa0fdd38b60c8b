"""The cold-start precompile's CPU-side pieces: where it applies, the trainer state a dry step may change
put back exactly (``polyrec.runtime.cold_start``), and the launchers built after the compiles (on stand-in
kernels). The dry run itself needs Triton's JIT on a GPU: ``tests/gpu/test_cold_start_gpu.py``."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from polyrec.kernels import precompile
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import rng_state
from polyrec.runtime import cold_start
from polyrec.runtime.cold_start import StepSnapshot, _put_back, applies, dense_selection


def _trainer(**changes) -> Trainer:
    cfg = TrainConfig(preset="dcnv2-small", batch_size=128, steps=10, device="cpu", log_every=10**9, **changes)
    return Trainer(cfg, progress=False)


def test_precompile_says_why_it_does_not_apply():
    assert applies(_trainer()) == "not on a GPU"
    assert applies(_trainer(precompile=False)) == "off (precompile=False)"
    assert _trainer().cold_start is None  # nothing ran


def test_recording_needs_triton_jit():
    if precompile.supported():
        pytest.skip("Triton's JIT is active: the refusal is for the interpreter")
    with pytest.raises(RuntimeError, match="Triton 3.6's JIT"):
        with precompile.recording_launches():
            pass


class _KernelCompiledByKey:
    """A stand-in for a ``JITFunction``: ``_do_compile`` leaves a compiled kernel per key in its cache, its
    source's argument types those of the replayed signature."""

    def __init__(self) -> None:
        self.device_caches = {0: ({}, None, None, None, None)}

    def _do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        compiled = SimpleNamespace(src=SimpleNamespace(signature=signature, key=key),
                                   metadata=SimpleNamespace(tensordesc_meta=None))
        self.device_caches[device][0][key] = compiled
        return compiled


def test_compile_recorded_builds_one_launcher_per_argument_types(monkeypatch):
    """Triton builds a kernel's launcher (a C module) at its first launch from its argument types alone: the
    precompile builds each once, from the kernels its compiles left in the JIT caches."""
    from triton.runtime.driver import driver

    built = []
    monkeypatch.setattr(driver, "_active", SimpleNamespace(launcher_cls=lambda src, md: built.append(src)))
    first, second = _KernelCompiledByKey(), _KernelCompiledByKey()
    int32 = {"x": "*bf16", "n": "i32", "BLOCK": "constexpr"}
    int64 = {"x": "*bf16", "n": "i64", "BLOCK": "constexpr"}
    renamed = {"y": "*bf16", "m": "i32", "B": "constexpr"}
    cases = ((first, "a", int32), (first, "b", int64), (second, "a", renamed), (second, "c", int64))
    records = [precompile.RecordedCompile(kernel=kernel, key=key, signature=sig, device=0, constexprs={}, options=None,
                                          attrs={}) for kernel, key, sig in cases]
    assert precompile.compile_recorded(records, threads=2) >= 0
    # the second kernel's "a" has the first's "a" types under other names, its "c" the first's "b" types
    assert len(built) == 2
    assert sorted(tuple(src.signature.values()) for src in built) == [("*bf16", "i32", "constexpr"),
                                                                      ("*bf16", "i64", "constexpr")]


def test_put_back_restores_in_place_and_drops_added_entries():
    live_tensor = torch.tensor([1.0, 2.0])
    live = {"a": live_tensor, "nested": {"b": torch.zeros(2), "n": 3}, "added": torch.ones(1)}
    saved = {"a": torch.tensor([5.0, 6.0]), "nested": {"b": torch.ones(2), "n": 1}}
    _put_back(live, saved)
    assert live["a"] is live_tensor and live_tensor.tolist() == [5.0, 6.0]
    assert live["nested"]["b"].tolist() == [1.0, 1.0] and live["nested"]["n"] == 1
    assert "added" not in live


def _dense_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {f"{n}.{k}": v.clone() for n, part in trainer._dense_named() for k, v in part.state_dict().items()}


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_snapshot_puts_back_what_steps_change(optimizer):
    """Two real steps change the dense weights, the optimizer state (Adam's made in its first step), the
    data position, the RNG and the step count; the snapshot taken before puts every one back."""
    trainer = _trainer(dense_optimizer=optimizer)
    dense, position, rng = _dense_state(trainer), trainer.source.state_dict(), rng_state(trainer.rt.device)
    optim = {p: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
             for p, s in trainer.optimizer.state.items()}
    snapshot = StepSnapshot.take(trainer)
    for _ in range(2):
        trainer.train_step()
    assert trainer.step == 2 and any(not torch.equal(v, _dense_state(trainer)[k]) for k, v in dense.items())
    snapshot.restore(trainer)
    assert trainer.step == 0 and trainer.source.state_dict() == position
    assert torch.equal(torch.get_rng_state(), rng["cpu"])
    after = _dense_state(trainer)
    assert all(torch.equal(v, after[k]) for k, v in dense.items())
    assert set(trainer.optimizer.state) == set(optim)  # Adam: no state before its first step, none after
    for p, s in optim.items():
        for k, v in s.items():
            live = trainer.optimizer.state[p][k]
            assert torch.equal(live, v) if isinstance(v, torch.Tensor) else live == v
    assert all(p.grad is None for p in trainer.model.dense_parameters())


def test_a_failed_dry_run_is_reported_and_training_goes_on(monkeypatch):
    """The precompile is an optimisation: a dry run that raises leaves a warning and the reason, and the step
    runs (its kernels compile at their first launch)."""
    import polyrec.runtime.trainer as trainer_module

    def broken(trainer):
        raise ValueError("garbage in a torch op")

    monkeypatch.setattr(trainer_module, "precompile_first_step", broken)
    trainer = _trainer()
    trainer.precompile_skipped = None  # as on a GPU, where it applies
    with pytest.warns(RuntimeWarning, match="the precompile failed: ValueError: garbage in a torch op"):
        loss = trainer.train_step()
    assert torch.isfinite(loss) and trainer.step == 1 and trainer.cold_start is None
    assert trainer.precompile_skipped.startswith("the precompile failed")


@pytest.mark.parametrize("command", [["train", "--steps", "1", "--cpu-threads", "1"],
                                     ["bench", "e2e", "--steps", "1", "--warmup", "0"]])
def test_a_failed_dry_run_is_a_warning_line_of_polyrec_train(command, monkeypatch):
    """`polyrec train` and `polyrec bench e2e` showed it as Python shows a warning ("/.../polyrec/runtime/
    train_loop.py:N: RuntimeWarning: precompile: ..." and a source line); now it is a `warning:` line on stderr, as
    polyrec's other messages are."""
    import sys
    import warnings

    from typer.testing import CliRunner

    import polyrec.runtime.trainer as trainer_module
    from polyrec.cli import app

    def broken(trainer):
        raise ValueError("garbage in a torch op")

    def python_shows(message, category, filename, lineno, file=None, line=None):  # as Python does; pytest records
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(trainer_module, "precompile_first_step", broken)
    monkeypatch.setattr(trainer_module, "applies", lambda trainer: None)  # as on a GPU, where it applies
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = python_shows
        result = CliRunner().invoke(app, [*command, "--batch-size", "8", "--row-cap", "64", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert ("warning: precompile: the precompile failed: ValueError: garbage in a torch op; kernels compile at their "
            "first launch") in result.stderr, result.stderr
    assert "RuntimeWarning" not in result.stderr and ".py:" not in result.stderr, result.stderr


@pytest.mark.parametrize("graphed", [True, False])
def test_a_graphed_runs_dry_steps_select_gemms_as_its_capture_will(graphed, monkeypatch):
    """So the capture's GEMMs (chosen by GPU time alone) are compiled in the precompile, not in the capture."""
    from polyrec.kernels.gemm import _selects_as_captured

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    with dense_selection(SimpleNamespace(graphs=SimpleNamespace(on=graphed))):
        assert _selects_as_captured(SimpleNamespace(is_cuda=True)) is graphed


def test_the_dry_run_evaluates_once_eagerly_and_puts_the_data_back(monkeypatch):
    """The first evaluation's kernels are recorded too: after the dry steps, one held-out forward without
    autograd, at the full batch size and outside the capture's GEMM selection; the data position is put back."""
    trainer = _trainer(cuda_graphs=False)
    seen, selecting = [], []

    @contextmanager
    def recording():
        yield []

    @contextmanager
    def selection(_):
        selecting.append(True)
        yield
        selecting.pop()

    def logits(batch):
        seen.append((batch.batch_size, torch.is_grad_enabled(), bool(selecting)))
        return eval_logits(batch)

    eval_logits = trainer.eval_logits
    monkeypatch.setattr(trainer, "eval_logits", logits)
    monkeypatch.setattr(cold_start.precompile, "recording_launches", recording)
    monkeypatch.setattr(cold_start.precompile, "compile_recorded", lambda records: 0.0)
    monkeypatch.setattr(cold_start, "dense_selection", selection)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    position = trainer.source.state_dict()
    cold = cold_start.precompile_first_step(trainer)
    assert seen == [(128, False, False)] and cold.kernels == 0
    assert trainer.source.state_dict() == position and trainer.step == 0
