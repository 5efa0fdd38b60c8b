"""The run around the training step: the loop to ``cfg.steps`` with its logging, evaluations, checkpoints,
signal (SIGTERM, Ctrl-C) and non-finite-loss stops, and how the run ended (:class:`TrainResult`).

``TrainLoop`` holds these methods of ``polyrec.runtime.trainer.Trainer``; it reads the trainer's config,
step, model, source, metrics log, timer, stop state and batches taken ahead, and calls its ``train_step``,
``take_first_batches``, ``evaluate`` and (``TrainerState``'s) ``save`` / ``finite_state``.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from polyrec.data import DataError
from polyrec.runtime import parallel
from polyrec.runtime.checkpoint import checkpoint_path, hold_checkpoint_dir
from polyrec.runtime.metrics import PhaseTimer
from polyrec.startup import STOP_SIGNALS

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: What a save's check (``finite_state``) found non-finite: the losses logged so far were finite.
STATE_NOT_FINITE = "a weight or optimizer state"
#: A rank's stop vote (``parallel.StopVote``) where its training data failed to give a batch it is to train (on
#: several ranks): above every signal number, so that the vote's maximum carries it over a signal.
DATA_STOP = signal.NSIG
#: Why data that stops the run before any step of it saves nothing.
NOT_TRAINED = "no step trained since the run started"


@dataclass(kw_only=True, slots=True)
class TrainResult:
    """How a run ended and what it measured."""

    status: str  # "done", "sigterm" (SIGTERM or SIGINT: checkpoint saved, clean exit), "nan" (last good checkpoint kept)
    step: int  # steps completed in total (including those before a resume)
    message: str
    losses: list[float] = field(default_factory=list)  # loss of every step this process ran, to a non-finite one
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "auc", "logloss"} per evaluation
    samples_per_s: float = 0.0  # training throughput, eval and checkpoint time excluded
    timing_ms: dict[str, float] = field(default_factory=dict)  # mean ms per step of each phase
    checkpoint: Path | None = None
    bad_rows: int = 0  # the training data's bad rows skipped under skip_bad_rows
    bad_row_examples: list[str] = field(default_factory=list)
    eval_bad_rows: int = 0  # the eval_data file's, counted apart (0 without such a file)
    eval_bad_row_examples: list[str] = field(default_factory=list)
    nothing_to_train: bool = False  # already at cfg.steps: no step, no evaluation, no checkpoint written

    @property
    def final_auc(self) -> float | None:
        return self.evals[-1]["auc"] if self.evals else None


class TrainLoop:
    """The loop of ``Trainer`` (see the module docstring)."""

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self._stop_signal is not None:
            raise KeyboardInterrupt  # Ctrl-C again while stopping (STOP_SIGNALS)
        self._stop_signal = signum

    def train(self) -> TrainResult:
        """Run to ``cfg.steps``; returns how it ended. Holds the checkpoint directory meanwhile (a second run on
        it is refused: ``hold_checkpoint_dir``). Handles STOP_SIGNALS while it runs (from the main
        thread; a signal the process ignores stays ignored) and restores the handlers it replaced."""
        held = (hold_checkpoint_dir(Path(self.cfg.checkpoint_dir))  # one rank holds it for all
                if self.cfg.checkpoint_dir is not None and self.ctx.is_main else None)
        previous = self._handle_stop_signals()
        try:
            result = self._loop()
            if self._stop_vote is not None:
                self._stop_vote.drain()
            return result
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.log.close()
            self.source.close()  # reading on (another train()) opens its file again where it stopped
            if held is not None:  # the directory is free for the next run
                held.close()

    def _handle_stop_signals(self) -> dict[int, Any]:
        """Install ``_on_signal`` for STOP_SIGNALS; returns the handlers it replaced. None off the main
        thread (Python runs handlers there only), and none for a signal set to SIG_IGN (a job started with
        ``&`` by a script: Ctrl-C at the script is not meant for it)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}

    def _progress_bar(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        return Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]} samples/s  loss {task.fields[loss]}"),
                        TimeRemainingColumn(), disable=not self.progress, transient=False)

    def _loop(self) -> TrainResult:
        cfg = self.cfg
        if self.step >= cfg.steps:
            return self._owed_evaluation() if self.eval_owed else self._nothing_to_train()
        result = TrainResult(status="done", step=self.step, message="")
        self._log_start()
        if self.eval_owed:  # a periodic evaluation its eval data stopped, at this step: made before training on
            stopped = self._eval_and_log(result)
            if stopped is not None:
                return stopped
        self._precompile_and_log()
        start_step, train_seconds = self.step, 0.0
        self.timer = PhaseTimer(self.rt.device)  # this run's breakdown only
        pending: list[torch.Tensor] = []
        saved_step = None  # the step of this run's last periodic checkpoint
        if self._stop_vote is not None:  # several ranks: one whose data fails on the first step's batches stops all
            self.take_first_batches()
            if self._stop_vote.settle(self._data_stop()) == DATA_STOP:
                self._stop_on_ranks_data(trained=False)
        with self._progress_bar() as bar:
            task = bar.add_task("train", total=cfg.steps, completed=self.step, rate="-", loss="-")
            window_start, window_first = time.perf_counter(), self.step
            while self.step < cfg.steps and self._stopping is None:
                try:
                    pending.append(self.train_step())
                except DataError as exc:  # a malformed training row: the steps trained before it are kept
                    self._stop_on_training_data(exc, pending, trained=self.step > start_step)
                self._stopping = (self._stop_signal if self._stop_vote is None
                                  else self._stop_vote.agreed(self._data_stop() or self._stop_signal))
                bar.update(task, completed=self.step)
                due_eval = cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps
                last = self.step == cfg.steps or self._stopping is not None
                # the last step's checkpoint is the finish's, after its evaluation (one write, not two)
                due_ckpt = (cfg.checkpoint_dir and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
                            and not last)
                if not (self.step % cfg.log_every == 0 or due_eval or due_ckpt or last):
                    continue
                stacked = torch.stack(pending)
                losses = (parallel.global_mean(stacked) if self.distributed else stacked).float().cpu().tolist()
                pending.clear()
                self.model.embeddings.check_errors()
                elapsed = time.perf_counter() - window_start
                train_seconds += elapsed
                rate = (self.step - window_first) * cfg.batch_size / max(elapsed, 1e-9)
                bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), len(losses))
                first = self.step - len(losses) + 1  # the window's first step
                if bad > 0:  # the window's finite steps: all, or those before a non-finite loss
                    self._log_train(result, bar, task, losses[:bad], first + bad - 1, rate)
                if bad < len(losses):
                    return self._stop_on_nan(result, first + bad, losses[bad])
                if self._stopping == DATA_STOP:
                    self._stop_on_ranks_data(trained=self.step > start_step)
                stopped = self._eval_and_log(result) if due_eval else None
                if stopped is not None:
                    return stopped
                if due_ckpt:
                    stopped = self._save_if_finite(result)
                    if stopped is not None:
                        return stopped
                    saved_step = self.step
                if due_eval or due_ckpt:
                    self._stopping = self._stop_after_pause()
                    if self._stopping == DATA_STOP:
                        self._stop_on_ranks_data(trained=self.step > start_step)
                window_start, window_first = time.perf_counter(), self.step
        return self._finish(result, start_step, train_seconds, saved_step)

    def _log_train(self, result: TrainResult, bar: Progress, task: TaskID, losses: list[float], step: int,
                   rate: float) -> None:
        """Record the finite ``losses`` of a window's steps, up to ``step``: in ``result``, as a ``train``
        line of the metrics log (their mean and last; ``rate`` in samples/s) and on the progress bar or a
        plain line."""
        result.losses += losses
        self.log.write({"event": "train", "step": step, "loss": sum(losses) / len(losses),
                        "last_loss": losses[-1], "samples_per_s": rate})
        bar.update(task, rate=f"{rate:,.0f}", loss=f"{losses[-1]:.4f}")
        if not (self.progress or self.echo_json or self.quiet):
            print(f"step {step}/{self.cfg.steps}  loss {losses[-1]:.4f}  {rate:,.0f} samples/s", flush=True)

    def _save_if_finite(self, result: TrainResult) -> TrainResult | None:
        """Save a checkpoint (``result.checkpoint``; None: go on) where every weight and optimizer state is
        finite; else stop as a non-finite loss does, the last good checkpoint kept (the stopped result)."""
        if not self.finite_state():
            return self._stop_on_nan(result, self.step, float("nan"), what=STATE_NOT_FINITE)
        result.checkpoint = self.save()
        return None

    def _stop_after_pause(self) -> int | None:
        """The stop signal after a periodic save or evaluation: one received while it ran (a save of the
        full model takes minutes) stops the run now, not after one more step and a second save."""
        if self._stop_vote is None:
            return self._stop_signal
        return self._stop_vote.settle(self._data_stop() or self._stop_signal)

    def _data_stop(self) -> int | None:
        """This rank's stop vote for its data: DATA_STOP where a batch it is to train (up to ``cfg.steps``) is a
        placeholder for one its data failed to give (``Trainer._start_inputs``). A batch is taken two steps ahead
        and the vote read a step after it is sent, so the ranks stop before a step takes it (with
        ``Trainer.inputs_ahead`` = 1, one step ahead, a step may take it: ``_stop_on_training_data``)."""
        failed = next((i for i, (*_, error) in enumerate(self._ahead) if error is not None), None)
        return DATA_STOP if failed is not None and self.step + 1 + failed <= self.cfg.steps else None

    def _precompile_and_log(self) -> None:
        """The first step's kernels compiled ahead (``Trainer.precompile``), said while it runs and logged."""
        from rich.console import Console

        console = Console(stderr=True, quiet=not self.progress)
        with console.status("compiling the first step's kernels (dry run, then one thread per core)"):
            cold = self.precompile()
        record = ({"skipped": self.precompile_skipped} if cold is None else dataclasses.asdict(cold))
        self.log.write({"event": "precompile", "step": self.step, **record})
        if cold is not None and not (self.progress or self.echo_json or self.quiet):
            print(f"precompiled {cold.kernels} kernels: dry run {cold.dry_s:.1f} s, compiles and launchers "
                  f"{cold.compile_s:.1f} s", flush=True)

    def _log_start(self) -> None:
        """The ``start`` event of this run's segment of the metrics log: its step, settings, backends and model."""
        self.log.write({"event": "start", "step": self.step, "config": self.cfg.as_dict(),
                        "device": str(self.rt.device), "embedding_backend": self.rt.embedding_backend,
                        "dense_backend": self.rt.dense_backend,
                        "compute_dtype": str(self.rt.compute_dtype).removeprefix("torch."),
                        "cuda_graphs": self.graphs.on, "cuda_graphs_reason": self.graphs.reason,
                        "host_bound": self.graphs.host_bound, "model": dataclasses.asdict(self.model_config)})

    def _ended(self, result: TrainResult, ran: int) -> str:
        """How a run that returned ended, for its result and ``end`` event (``ran``: the steps it trained)."""
        if result.status == "sigterm":
            return f"stopped by signal {self._stopping} ({signal.Signals(self._stopping).name}) at step {self.step}"
        if ran:
            return f"trained {ran} steps (to step {self.step})"
        if result.evals:
            return f"evaluated the checkpoint at step {self.step}, as its run's end owed"
        return f"the checkpoint at step {self.step} owed its evaluation, which this run has no eval data for"

    def _owed_evaluation(self) -> TrainResult:
        """A checkpoint at ``cfg.steps`` whose run's final evaluation its eval data stopped (``eval_owed``): that
        evaluation now, logged and saved as the run's end would have (a resume with the eval file fixed and the
        same --steps; it said "nothing to train", the run's AUC out of reach without training on)."""
        self._log_start()
        self.timer = PhaseTimer(self.rt.device)
        return self._finish(TrainResult(status="done", step=self.step, message=""), self.step, 0.0, None)

    def _nothing_to_train(self) -> TrainResult:
        """Already at ``cfg.steps`` (a resumed checkpoint at or past them): said so; nothing is evaluated,
        logged or saved, so the checkpoint and the metrics log stay as they are."""
        directory = self.cfg.checkpoint_dir
        where = f"checkpoint {directory}" if directory else "the trainer"
        message = f"{where} is at step {self.step}; --steps {self.cfg.steps} asks for no more: nothing to train"
        return TrainResult(status="done", step=self.step, message=message, nothing_to_train=True,
                           checkpoint=self._saved_checkpoint())

    def _saved_checkpoint(self) -> Path | None:
        """The checkpoint file in ``cfg.checkpoint_dir`` where one has been written, else None."""
        ckpt = checkpoint_path(Path(self.cfg.checkpoint_dir)) if self.cfg.checkpoint_dir else None
        return ckpt if ckpt is not None and ckpt.is_file() else None

    def _eval_and_log(self, result: TrainResult) -> TrainResult | None:
        """Evaluate and log; a non-finite eval log loss stops the run as a non-finite training loss does
        (the stopped result is returned; None: go on)."""
        ev = self._evaluate_keeping_state()
        if ev is None:
            return None
        result.evals.append(ev)
        self.log.write({"event": "eval", **ev})
        if not (self.echo_json or self.quiet):
            print(f"eval at step {ev['step']}: AUC {ev['auc']:.4f}  logloss {ev['logloss']:.4f}", flush=True)
        if math.isfinite(ev["logloss"]):
            return None
        return self._stop_on_nan(result, ev["step"], ev["logloss"], what="eval logloss")

    def _evaluate_keeping_state(self) -> dict[str, Any] | None:
        """``evaluate``; held-out data that stops the run (a malformed eval row, an eval file with no good row)
        stops it keeping the trained state (``_raise_keeping_state``): else the steps since the last periodic
        checkpoint are lost, every one with the default evaluation at the end."""
        try:
            evaluated = self.evaluate()
        except DataError as exc:
            self.eval_owed = True  # a resume at this step runs it: before training on, or as the run's end
            self._raise_keeping_state(exc, "eval data")
        self.eval_owed = False
        return evaluated

    def _stop_on_training_data(self, exc: DataError, pending: list[torch.Tensor], *, trained: bool) -> NoReturn:
        """Training data that stops the run (a malformed row without skip_bad_rows; with it, no good row in the
        files): the source is back at the start of the batch it stopped (``polyrec.data.types.keeping_position``), so
        the state of the last step is kept (``_raise_keeping_state``) where this process trained one and the
        losses not checked yet (``pending``) are finite, and a resume reads that batch whole, as a run that never
        stopped does. On several ranks the ranks agree to stop before that batch (``_stop_on_ranks_data``); a step
        that takes it (``_data_stop``) stops alone, saving nothing: the others are not stopping."""
        losses = torch.stack(pending).float().cpu().tolist() if pending else []
        not_saved = ("the other ranks are not stopping with this one" if self.distributed and self.ctx.world_size > 1
                     else NOT_TRAINED if not trained
                     else "a loss since the last check is not finite" if not all(map(math.isfinite, losses)) else None)
        self._raise_keeping_state(exc, "training data", not_saved=not_saved)

    def _stop_on_ranks_data(self, *, trained: bool) -> NoReturn:
        """Several ranks whose vote found a rank's training data failed (``_data_stop``): every rank stops after the
        same step, the last before the first batch that failed, and keeps its state as one rank does
        (``_raise_keeping_state``; the losses to it are checked), each rank's data position at the start of its
        next batch. The rank whose data failed raises its error; the others raise it naming that rank, and rank 0
        logs it with the rank."""
        self._stop_vote.drain()
        mine = self._data_failed
        failed = [(rank, fields) for rank, fields in enumerate(parallel.gather(
            None if mine is None else (mine.path, mine.line, mine.problem))) if fields is not None]
        rank, (path, line, problem) = failed[0]
        exc = mine or DataError(path, line, f"{problem} (rank {rank}'s training data)")
        self._raise_keeping_state(exc, "training data", not_saved=None if trained else NOT_TRAINED,
                                  rank=self.ctx.rank if mine else rank)

    def _raise_keeping_state(self, exc: DataError, reason: str, *, not_saved: str | None = None,
                             rank: int | None = None) -> NoReturn:
        """Raise ``exc`` (data that stops the run) after saving the trained state where there is a checkpoint
        directory, no reason not to (``not_saved``) and the state is finite, as a signal's stop does; the error then
        names the checkpoint, or why nothing was saved. Logs a ``stopped`` event with ``reason`` (and, on several
        ranks, the ``rank`` whose data it was)."""
        problem = exc.problem
        if self.cfg.checkpoint_dir:
            if not_saved is None and not self.finite_state():
                not_saved = f"{STATE_NOT_FINITE} is not finite"
            problem += (f"; {not_saved}: nothing saved" if not_saved is not None
                        else f"; the run's state at step {self.step} is saved in {self.save()}")
        event = {"event": "stopped", "reason": reason, "step": self.step,
                 "message": f"{exc.path}:{exc.line}: {problem}"}
        self.log.write(event if rank is None else event | {"rank": rank})
        raise DataError(exc.path, exc.line, problem) from exc

    def _stop_on_nan(self, result: TrainResult, step: int, value: float, what: str = "loss") -> TrainResult:
        ckpt = self._saved_checkpoint()
        kept = f"the last good checkpoint is {ckpt}" if ckpt else "no checkpoint was written before it"
        result.status, result.step = "nan", step
        result.checkpoint = ckpt
        result.message = (f"{what} became {value} at step {step}: training stopped; {kept}. "
                          "Try a lower learning rate (--lr) or fp32 (--precision fp32).")
        self.log.write({"event": "stopped", "reason": "nan", "step": step, "message": result.message})
        self.log.close()
        return result

    def _finish(self, result: TrainResult, start_step: int, train_seconds: float,
                saved_step: int | None) -> TrainResult:
        ran = self.step - start_step
        result.step = self.step
        result.samples_per_s = ran * self.cfg.batch_size / train_seconds if train_seconds > 0 else 0.0
        result.timing_ms = self.timer.per_step_ms(ran)
        if self._stopping is not None and self.step < self.cfg.steps:  # one during the last step: the run is done
            result.status = "sigterm"
        else:
            stopped = self._eval_and_log(result)
            if stopped is not None:
                return stopped
        if self.cfg.checkpoint_dir and saved_step != self.step:  # not twice at one step
            stopped = self._save_if_finite(result)
            if stopped is not None:
                return stopped
        bad, eval_bad = self.source.bad_rows, self.source.eval_bad_rows
        # on several ranks each skipped the rows of its own blocks (every rank reads the whole eval file)
        result.bad_rows, result.bad_row_examples = (parallel.all_bad_rows(bad) if self.distributed
                                                    else (bad.count, list(bad.examples)))
        if eval_bad is not None:
            result.eval_bad_rows, result.eval_bad_row_examples = eval_bad.count, list(eval_bad.examples)
        where = f"; checkpoint {result.checkpoint}" if result.checkpoint else ""
        result.message = self._ended(result, ran) + where
        self.log.write({"event": "end", "status": result.status, "step": self.step, "message": result.message,
                        "samples_per_s": result.samples_per_s, "timing_ms_per_step": result.timing_ms,
                        "final_auc": result.final_auc, "bad_rows": result.bad_rows,
                        "bad_row_examples": result.bad_row_examples, "eval_bad_rows": result.eval_bad_rows,
                        "eval_bad_row_examples": result.eval_bad_row_examples})
        return result
