"""The training loop: data -> embeddings -> dense (bf16 on GPU, fp32 masters) -> optimizers.

A step runs in four timed parts: the embedding forward; the dense forward and backward up to a tap
that stands in for the embeddings; the embedding backward from the gradient the tap caught (polyrec's
TBE applies its fused optimizer here); the dense (and torch-embedding) optimizer steps. Losses stay on the
device and are read every ``log_every`` steps, which is also when a non-finite loss is caught.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext as _nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from polyrec.data import Batch, DataError, open_source
from polyrec.data.sources import shared_files
from polyrec.models import DLRM, EmbeddingOptimConfig, preset
from polyrec.runtime.checkpoint import METRICS_NAME, prepare_checkpoint_dir, refuse_another_run, refuse_held
from polyrec.runtime.cold_start import ColdStart, applies, precompile_first_step
from polyrec.runtime import parallel
from polyrec.runtime.config import (TrainConfig, check_collective_timeout, check_counts, expand_paths, resolve,
                                    table_row_dtypes)
from polyrec.runtime.dist import init_distributed, launched_by_torchrun
from polyrec.runtime.graphs import capture, choose_graphs, mark_host_bound
from polyrec.runtime.plan_apply import apply_plan, check_data_model, check_plan, plan_preset, read_plan
from polyrec.runtime.metrics import MetricsLog, PhaseTimer, auc
from polyrec.runtime.train_loop import TrainLoop
from polyrec.runtime.trainer_state import TrainerState


class RunWarning(RuntimeWarning):
    """What the trainer tells its user that does not stop the run (a plan priced for other lookups per sample, a
    failed precompile): a RuntimeWarning for a library caller to see or catch; ``polyrec train`` prints it as a
    ``warning:`` line, as its other messages (``polyrec.cli.train.run_warnings_as_lines``)."""


class _GradientTap(torch.autograd.Function):
    """The embeddings as the dense half's input; the backward keeps the gradient that arrives, as it
    arrives, and passes nothing on. A leaf standing in instead would take its gradient through
    AccumulateGrad, which copies a strided one (the embedding columns of the cross network's input
    gradient, [B, F*D] of [B, (F+1)*D]) into a contiguous ``.grad``: 436 MB read and written per
    MLPerf step at 65536. The TBE backward reads gradient rows at any row stride. ``anchor``: a
    tensor that requires grad, so the tap takes part in autograd."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, emb: torch.Tensor, caught: list) -> torch.Tensor:
        ctx.caught = caught
        return emb.view_as(emb)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.caught.append(grad)
        return None, None, None


def dense_optimizer(params: list[nn.Parameter], kind: str, lr: float, *, fused: bool) -> torch.optim.Optimizer:
    """The dense optimizer: Adagrad (MLPerf) or Adam. ``fused`` (polyrec's dense path on a GPU): Adagrad
    as one Triton launch per step (``polyrec.kernels.dense_optim.FusedAdagrad``, the same update and
    state as torch's); the direct port and the CPU keep ``torch.optim``."""
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    if fused:
        from polyrec.kernels.dense_optim import FusedAdagrad

        return FusedAdagrad(params, lr=lr)
    return torch.optim.Adagrad(params, lr=lr)


def keeps_copies(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the dense optimizer writes the masters' compute-dtype copies (``FusedAdagrad``;
    ``polyrec.kernels.master_copies``), which a CUDA graph of the dense half may then read."""
    from polyrec.kernels.dense_optim import FusedAdagrad

    return isinstance(optimizer, FusedAdagrad)


class DenseLoss(nn.Module):
    """The dense half of a step as one module (what a CUDA graph captures): mean BCE of the logits."""

    def __init__(self, model: DLRM, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.parts = nn.ModuleList(model.dense_parts())
        self.model_ref = [model]  # a list, so the model is not registered twice as a submodule
        self.compute_dtype = compute_dtype

    def forward(self, dense: torch.Tensor, emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.model_ref[0].dense_forward(dense, emb, self.compute_dtype)  # [B]
        return F.binary_cross_entropy_with_logits(logits, labels)


class Trainer(TrainerState, TrainLoop):
    """Builds the data source, model and optimizers of a TrainConfig, and runs or benchmarks it."""

    #: Batches whose input distribution runs ahead of their step, sharded tables on several ranks
    #: (``_send_inputs_ahead``): 2 = the next batch's whole exchange and the one after's lengths.
    inputs_ahead = 2

    def __init__(self, cfg: TrainConfig, *, echo_json: bool = False, progress: bool | None = None,
                 typed: frozenset[str] = frozenset()) -> None:
        """``typed``: the fields of ``cfg`` its user gave (``polyrec train``'s options on the command line): a
        ``--plan`` refuses one of them that differs from its choice even where it is the field's default."""
        self.distributed = launched_by_torchrun()
        check_collective_timeout(cfg)  # before the process group it sets
        self.ctx = init_distributed(timeout_s=cfg.collective_timeout_s)
        cfg = expand_paths(cfg)
        check_counts(cfg)
        planned = read_plan(cfg.plan) if cfg.plan is not None else None  # read once: its preset, then the rest
        cfg = plan_preset(cfg, planned, typed) if planned is not None else cfg
        try:
            base = preset(cfg.preset)
        except ValueError as unknown:
            raise ValueError(f"--preset {cfg.preset}: {unknown}") from None
        if cfg.row_cap:
            base = base.with_capped_rows(cfg.row_cap)
        self.plan = (check_plan(cfg.plan, planned, base, self.ctx.world_size, cfg.row_cap) if planned is not None
                     else None)
        if self.plan is not None:
            cfg = apply_plan(cfg, self.plan, typed)
        self.cfg, self.rt = cfg, resolve(cfg)
        if self.distributed:
            parallel.check_job(cfg, self.rt.embedding_backend, self.plan)
            self.rt.device = self.ctx.device
        self._check_checkpoint_dir()
        if cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)
        data_seed = parallel.rank_seed(cfg.seed, self.ctx) if self.distributed else cfg.seed
        self.source = open_source(cfg.data, base, batch_size=cfg.batch_size, seed=data_seed, device=self.rt.device,
                                  skip_bad_rows=cfg.skip_bad_rows, eval_spec=cfg.eval_data,
                                  num_eval_batches=cfg.eval_batches, synthetic_pool=cfg.synthetic_pool,
                                  shared_seed=cfg.seed, rank=self.ctx.rank, world_size=self.ctx.world_size,
                                  row_cap=cfg.row_cap, prefetch=cfg.prefetch)
        self.model_config = self.source.adapt(base)
        shared = shared_files(cfg.data, cfg.eval_data)
        if shared:
            warnings.warn(f"--eval-data reads {', '.join(map(str, shared))}, which the training data reads too: its "
                          "AUC measures how well the model remembers those rows, not how it does on new ones",
                          RunWarning, stacklevel=2)
        note = (check_data_model(cfg.plan, self.plan, self.model_config, cfg.row_cap, cfg.data)
                if self.plan is not None else None)
        if note is not None:
            warnings.warn(note, RunWarning, stacklevel=2)
        torch.manual_seed(cfg.seed)
        emb_opt = EmbeddingOptimConfig(kind=cfg.embedding_optimizer, lr=cfg.embedding_lr or cfg.lr)
        row_dtypes = table_row_dtypes(self.rt, self.model_config.num_tables)
        sharded = (parallel.sharded_embeddings(self.model_config, emb_opt, self.ctx, seed=cfg.seed,
                                               weight_dtype=row_dtypes,
                                               output_dtype=self.rt.compute_dtype, plan=self.plan)
                   if self.distributed else None)
        self.model = DLRM(self.model_config, embedding_backend=self.rt.embedding_backend,
                          dense_backend=self.rt.dense_backend, embedding_optimizer=emb_opt, device=self.rt.device,
                          seed=cfg.seed, embedding_output_dtype=self.rt.compute_dtype,
                          embedding_weight_dtype=row_dtypes, embeddings=sharded,
                          dense_fp8=self.rt.dense_fp8)
        self.optimizer = dense_optimizer(self.model.dense_parameters(), cfg.dense_optimizer, cfg.lr,
                                         fused=self.rt.dense_backend == "polyrec" and self.rt.device.type == "cuda")
        self.dense_loss: nn.Module | Any = DenseLoss(self.model, self.rt.compute_dtype)
        if self.distributed:
            on_last_bucket = sharded.update_after_current if sharded.updates_beside else None
            self.dense_loss = parallel.data_parallel(self.dense_loss, self.ctx, on_last_bucket=on_last_bucket)
        self.graphs = choose_graphs(cfg, self.rt, self.model_config, self.distributed)
        mark_host_bound(self.model, self.graphs.host_bound)
        self._graphed = False
        # the first step's kernels compiled ahead (runtime.cold_start), unless this says why not
        self.precompile_skipped: str | None = applies(self)
        self.cold_start: ColdStart | None = None
        self.dry_steps = False  # within cold_start's dry run: nothing is captured into a CUDA graph
        self._tap_anchor = torch.zeros((), device=self.rt.device, requires_grad=True)  # see _GradientTap
        self.step = 0
        self.eval_owed = False  # the evaluation at this step not done: its eval data stopped it (train_loop)
        self.timer = PhaseTimer(self.rt.device)
        metrics_path = cfg.metrics_path or (Path(cfg.checkpoint_dir) / METRICS_NAME if cfg.checkpoint_dir else None)
        main = self.ctx.is_main  # one rank logs, prints and shows the progress bar
        self.log = MetricsLog(metrics_path if main else None, echo=sys.stdout if echo_json and main else None)
        self.echo_json = echo_json
        self.quiet = not main
        self.progress = main and (progress if progress is not None else (not echo_json and sys.stdout.isatty()))
        self._stop_signal: int | None = None  # this process's stop signal (startup.STOP_SIGNALS)
        self._stopping: int | None = None  # the signal that stops the loop (on several ranks: agreed by all)
        self._stop_vote = (parallel.StopVote(self.ctx.timeout_s) if self.distributed and self.ctx.world_size > 1
                           else None)
        use_side = cfg.pipeline == "semi-sync" and cfg.overlap_streams and self.rt.device.type == "cuda"
        self._side = torch.cuda.Stream(self.rt.device) if use_side else None
        self._prefetched: tuple[Batch, torch.Tensor, Any] | None = None
        self._exchange_ahead = self.distributed and self.ctx.world_size > 1 and cfg.pipeline == "sync"
        # the next batches, their distribution begun (``_start_inputs``)
        self._ahead: deque[tuple[dict, Batch, Any, DataError | None]] = deque()
        self._data_failed: DataError | None = None  # where this rank's training data failed to give a batch ahead
        if cfg.resume:
            self.restore()

    def _check_checkpoint_dir(self) -> None:
        """Before anything is built: a checkpoint directory that cannot be written is found now, not
        after the last step, and a fresh run does not overwrite another run's checkpoint nor append to its
        metrics log."""
        if self.cfg.checkpoint_dir is None:
            return
        directory = Path(self.cfg.checkpoint_dir)
        if self.cfg.resume and not directory.exists():  # a mistyped directory is named, not created
            raise FileNotFoundError(f"no checkpoint to resume from: {directory} does not exist")
        prepare_checkpoint_dir(directory)
        if self.ctx.is_main:  # the rank that holds it while training (TrainLoop.train)
            refuse_held(directory)
        if not self.cfg.resume:
            refuse_another_run(directory, metrics_here=self.cfg.metrics_path is None)

    # --- one step -------------------------------------------------------------------------------------

    def _maybe_graph(self, batch: Batch, emb: torch.Tensor) -> None:
        """Replace the dense loss by a CUDA-graphed copy, captured on the first batch's shapes. With the
        sync pipeline the graph's embedding input is the lookup's own buffer, which every later lookup
        fills (``PolyrecEmbeddings.hold_output``): no copy into the graph, and DLRM-DCNv2's x0 is that
        buffer without a cat (0.50 + 0.23 ms per MLPerf step at batch 65536 on the H200,
        benchmarks/results/graphs_x0_2026-12-04/); semi-sync looks the next batch up before this
        one's dense half reads its buffer, so it copies."""
        if not self.graphs.on or self._graphed or self.dry_steps:
            return
        hold = getattr(self.model.embeddings, "hold_output", None)
        held = self.cfg.pipeline == "sync" and hold is not None and hold(emb)
        sample = (batch.dense.clone(), (emb.detach() if held else emb.detach().clone()).requires_grad_(),
                  batch.labels.clone())
        reads_held = getattr(self.source, "quiet", _nullcontext)  # a read-ahead thread's CUDA calls would
        with reads_held():  # fail the capture (``prefetch.Prefetching``)
            self.dense_loss = capture(self.dense_loss, sample, keep_copies=keeps_copies(self.optimizer))
        self._graphed = True

    def precompile(self) -> ColdStart | None:
        """Compile the first step's Triton kernels in parallel, once, before it runs (``runtime.cold_start``);
        None where that does not apply (``precompile_skipped`` says why)."""
        if self.cold_start is None and self.precompile_skipped is None and not self.dry_steps:
            try:
                self.cold_start = precompile_first_step(self)
            except Exception as exc:  # dry run or compiles: state put back; kernels compile at their first launch
                self.precompile_skipped = f"the precompile failed: {type(exc).__name__}: {exc}"
                warnings.warn(f"precompile: {self.precompile_skipped}; kernels compile at their first launch",
                              RunWarning, stacklevel=2)
        return self.cold_start

    def train_step(self) -> torch.Tensor:
        """One optimizer step; returns the loss (a device scalar, not synced)."""
        self.precompile()
        if self.cfg.pipeline == "semi-sync":
            return self._semi_sync_step()
        t = self.timer
        t.start("data")
        batch, started = self._batch_and_inputs()
        t.stop()
        t.start("emb_fwd")
        emb = self.model.embed(batch.values, batch.offsets, batch.batch_size, started=started,
                               bounds=batch.feature_bounds)  # [B, F, D]
        self._send_inputs_ahead()
        t.stop()
        loss, emb_grad = self._dense_step(batch, emb)
        t.start("emb_bwd")
        dense_stepped = self._embedding_backward(emb, emb_grad)
        t.stop()
        self._optimizer_step(dense_stepped=dense_stepped)
        return loss

    def _embedding_backward(self, emb: torch.Tensor, emb_grad: torch.Tensor) -> bool:
        """The embedding backward. Sharded tables on several ranks step the dense optimizer while their
        gradient crosses the all-to-all (its gradients are final once the dense backward and DDP's
        all-reduce are done): then the optimizer phase's time shows in emb_bwd. Returns whether the
        dense optimizer has stepped."""
        overlapping = getattr(self.model.embeddings, "backward_overlapping", None)
        if overlapping is None:
            emb.backward(emb_grad)
            return False
        return overlapping(emb, emb_grad, self._dense_optimizer_step)

    def _dense_optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _batch_and_inputs(self) -> tuple[Batch, Any]:
        """This step's batch and its input distribution as far as it went (None: the lookup
        distributes it): begun by ``_send_inputs_ahead`` in earlier steps, or now in the first."""
        if not self._exchange_ahead:
            return self.source.next_batch().to(self.rt.device, non_blocking=True), None
        if not self._ahead:
            self._ahead.append(self._start_inputs())
        _, batch, started, failed = self._ahead.popleft()
        if failed is not None:  # a placeholder (``_start_inputs``), which no step trains
            raise failed
        return batch, started

    def take_first_batches(self) -> None:
        """Sharded tables on several ranks, before the first step: the batches it takes (its own and those
        ``_send_inputs_ahead`` reads), taken now, so that the ranks can agree on a failed one before any step
        (``TrainLoop``). The same batches, with the same collectives on every rank."""
        while len(self._ahead) <= self.inputs_ahead:
            self._ahead.append(self._start_inputs())

    def _send_inputs_ahead(self) -> None:
        """Sharded tables on several ranks, once this step's lookup is queued: the next batch's ids are
        sent (``distribute_inputs``, on the input stream: they cross during this step's dense work)
        and the batch after it is taken and its distribution started (``start_inputs``: the lengths
        all-to-all and the split sizes' copy to the host, so that next step's one host read of those
        sizes finds them copied instead of waiting for queued work; measured: the world-2 embedding
        forward took 6.8 ms against 1.2 ms on one rank, multi_gpu_world2 at 8cd3e5a). No rank meets its
        peers at the start of a step: each goes from its embedding backward straight to its next
        lookup. The same batches in the same order: only their fetch moves up to two steps earlier; a
        checkpoint records the data position before the first batch taken ahead, so a resumed run
        fetches it again. ``inputs_ahead`` = 1: only the next batch's lengths run ahead."""
        if not self._exchange_ahead:
            return
        if self.inputs_ahead > 1 and self._ahead:
            self.model.embeddings.distribute_inputs(self._ahead[0][2])
        while len(self._ahead) < self.inputs_ahead:
            self._ahead.append(self._start_inputs())

    def _start_inputs(self) -> tuple[dict, Batch, Any, DataError | None]:
        """(data position before the batch, the next batch, its started input distribution, None). Where the data
        fails to give the batch (a malformed row; the source's position is put back to the batch's start:
        ``polyrec.data.types.keeping_position``), it and every later one are placeholders of its shape, so that the
        ranks' input collectives stay paired, with the error last: the ranks agree to stop before a step takes one
        (``TrainLoop._data_stop``), and ``_batch_and_inputs`` raises the error of one that a step would take."""
        position = self.source.state_dict()
        if self._data_failed is None:
            try:
                batch = self.source.next_batch().to(self.rt.device, non_blocking=True)
            except DataError as exc:
                self._data_failed = exc
        if self._data_failed is not None:
            batch = self._placeholder_batch()
        started = self.model.embeddings.start_inputs(batch.values, batch.offsets, batch.batch_size)
        return position, batch, started, self._data_failed

    def _placeholder_batch(self) -> Batch:
        """A batch of this rank's shape: ``cfg.batch_size`` samples of zeros, each bag one id 0 (a row of every
        table)."""
        size, features = self.cfg.batch_size, len(self.model_config.table_rows)
        return Batch(dense=torch.zeros(size, self.model_config.num_dense), labels=torch.zeros(size),
                     values=torch.zeros(features * size, dtype=torch.int64),
                     offsets=torch.arange(features * size + 1)).to(self.rt.device)

    def _dense_step(self, batch: Batch, emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense forward and backward from a stand-in for ``emb``; returns (loss, the gradient of
        ``emb``), the gradient as the dense backward made it (``_GradientTap``)."""
        self._maybe_graph(batch, emb)
        self.timer.start("dense")
        caught: list[torch.Tensor] = []
        stand_in = _GradientTap.apply(self._tap_anchor, emb.detach(), caught)
        self.model.embedding_grad_hook = self._early_gradient_exchange()
        try:
            loss = self.dense_loss(batch.dense, stand_in, batch.labels)
        finally:
            self.model.embedding_grad_hook = None
        loss.backward()
        self.timer.stop()
        grad = caught[0]
        # a graphed loss is the graph's output buffer, which the next replay rewrites: the losses a train loop
        # keeps until its next log line would all read the last step's
        loss = loss.detach().clone() if self._graphed else loss.detach()
        if self._graphed and self._side is not None:
            # a graphed backward's gradient is the graph's static buffer, which the next step's replay
            # rewrites while the side stream may still read it
            return loss, grad.clone()
        # torch's EmbeddingBag (the direct port) gets it contiguous, as through a leaf: the baseline's
        # step stays what it was
        return loss, grad if self.model.embeddings.fused else grad.contiguous()

    def _early_gradient_exchange(self) -> Callable[[torch.Tensor], None] | None:
        """Sharded tables on several ranks (sync pipeline): the embedding gradient's all-to-all starts
        inside the dense backward as soon as that gradient is final (``DLRM.embedding_grad_hook``;
        DLRM-DCNv2 calls it before the cross network's last weight gradients), so that the exchange
        crosses while they and the rest of the dense backward run; the embedding backward then takes it
        (``DistributedEmbeddings.start_backward``)."""
        return getattr(self.model.embeddings, "start_backward", None) if self._exchange_ahead else None

    def _optimizer_step(self, *, dense_stepped: bool = False) -> None:
        self.timer.start("optimizer")
        if not dense_stepped:
            self._dense_optimizer_step()
        self.model.embeddings.apply_gradients()
        self.timer.stop()
        self.step += 1

    # --- semi-synchronous pipeline ------------------------------------------------------------------------

    def _prefetch(self) -> tuple[Batch, torch.Tensor, Any]:
        """Next batch and its lookup, on the side stream when there is one: (batch, emb [B, F, D], ready event)."""
        with torch.cuda.stream(self._side) if self._side is not None else _nullcontext():
            self.timer.start("data")
            batch = self.source.next_batch().to(self.rt.device, non_blocking=True)
            self.timer.stop()
            self.timer.start("emb_fwd")
            emb = self.model.embed(batch.values, batch.offsets, batch.batch_size, bounds=batch.feature_bounds)
            self.timer.stop()
            ready = None
            if self._side is not None:
                ready = torch.cuda.Event()
                ready.record(self._side)
        return batch, emb, ready

    def _semi_sync_step(self) -> torch.Tensor:
        """TorchRec-style semi-synchronous step: the lookup of batch i+1 is issued before batch i's
        embedding update, so it reads tables one update old, and on a GPU it runs on a side stream
        while the dense layers of batch i run (the update of batch i then overlaps batch i+1's dense)."""
        if self._prefetched is None:
            self._prefetched = self._prefetch()
        batch, emb, ready = self._prefetched
        self._prefetched = self._prefetch()  # reads the tables before this step's update
        main = torch.cuda.current_stream() if self._side is not None else None
        if ready is not None:
            main.wait_event(ready)
            for t in (batch.dense, batch.labels, emb):
                t.record_stream(main)  # made on the side stream, used here: keep them until main is done
        loss, emb_grad = self._dense_step(batch, emb)
        with torch.cuda.stream(self._side) if self._side is not None else _nullcontext():
            if self._side is not None:
                self._side.wait_stream(main)
                emb_grad.record_stream(self._side)
            self.timer.start("emb_bwd")
            emb.backward(emb_grad)
            self.timer.stop()
        if self._side is not None and not self.model.embeddings.fused:
            main.wait_stream(self._side)  # torch's sparse optimizer steps on the gradients the side stream made
        self._optimizer_step()
        return loss

    def drain(self) -> None:
        """Make the main stream wait for the side stream (before reading tables: eval, checkpoints)."""
        if self._side is not None:
            torch.cuda.current_stream().wait_stream(self._side)

    # --- evaluation (checkpoints: TrainerState) ------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any] | None:
        """AUC and log loss on the source's held-out batches, or None when it has none; ``samples``: the
        distinct rows they cover (on several ranks, gathered only where each rank's are its own:
        ``Source.eval_rows_per_rank``)."""
        self.drain()
        batches = self.source.eval_batches()
        if not batches:
            return None
        scores, labels = [], []
        for b in batches:  # a short one padded to the batch the dry evaluation compiled for (runtime.cold_start)
            b = b.to(self.rt.device)
            scores.append(self.eval_logits(b.padded(self.cfg.batch_size))[:b.batch_size])
            labels.append(b.labels)
        logits, y = torch.cat(scores), torch.cat(labels)
        if self.distributed and self.source.eval_rows_per_rank:  # every rank's rows, once
            logits, y = (torch.cat([t.to(self.rt.device) for t in parallel.gather(x.cpu())]) for x in (logits, y))
        return {"step": self.step, "auc": auc(torch.sigmoid(logits), y),
                "logloss": float(F.binary_cross_entropy_with_logits(logits, y)), "samples": int(y.numel())}

    def eval_logits(self, batch: Batch) -> torch.Tensor:
        """The model's logits for one held-out batch already on the device, eager (no CUDA graph); the caller
        turns autograd off."""
        return self.model(batch.dense, batch.values, batch.offsets, self.rt.compute_dtype,
                          bounds=batch.feature_bounds)

    # --- benchmarking -----------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize(self.rt.device)

    def benchmark(self, *, warmup: int, steps: int) -> dict[str, float]:
        """Wall time of the first ``warmup`` steps (compiles included), samples/s of the next ``steps``
        and the median of their step intervals (``PhaseTimer.median_step_ms``)."""
        if steps < 1 or warmup < 0:
            raise ValueError(f"benchmark needs steps >= 1 and warmup >= 0, got steps {steps}, warmup {warmup}")
        self.sync()
        t0 = time.perf_counter()
        for _ in range(warmup):
            self.train_step()
        self.sync()
        t1 = time.perf_counter()
        self.timer = PhaseTimer(self.rt.device)
        for _ in range(steps):
            self.timer.step_boundary()
            loss = self.train_step()
        self.timer.step_boundary()
        self.sync()
        t2 = time.perf_counter()
        cold = {} if self.cold_start is None else {f"precompile_{k}": v for k, v in asdict(self.cold_start).items()}
        return {**cold, "first_steps_s": t1 - t0, "samples_per_s": steps * self.cfg.batch_size / (t2 - t1),
                "ms_per_step": 1e3 * (t2 - t1) / steps, "median_step_ms": self.timer.median_step_ms(),
                "last_loss": float(loss),
                **{f"{k}_ms": v for k, v in self.timer.per_step_ms(steps).items()},
                **{f"{k}_host_ms": v for k, v in self.timer.per_step_host_ms(steps).items()}}
