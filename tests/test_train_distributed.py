"""Multi-rank training (2 gloo processes, TBE through the interpreter): the sharded model equals the
single-process model on the global batch for every sharding kind, on 2 ranks and on 1 (where the
embeddings issue no all-to-all), and `polyrec train` under torchrun trains, checkpoints, and resumes
on 2 ranks, on 1 rank and without torchrun."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from distributed_util import free_port, run_on_ranks
from polyrec.models import DLRM, EmbeddingOptimConfig, preset
from polyrec.runtime import parallel
from polyrec.runtime.dist import DistContext
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings
from polyrec.runtime.shards import TableSharding

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the TBE runs on the CPU only through Triton's interpreter")

B, STEPS = 8, 3  # local batch per rank, optimizer steps
CONFIG = preset("dcnv2-small").with_capped_rows(40).replace(table_rows=(40, 3, 17, 40), multi_hot=(2, 1, 3, 1))
# Row-wise Adagrad keeps one accumulator per row of each shard, so a column-wise shard's differs
# from the whole table's (as in TorchRec): column-wise cases use full Adagrad to compare exactly.
KINDS = {"table": (("table", "table", "table", "table"), "rowwise_adagrad"),
         "row": (("row", "row", "row", "row"), "rowwise_adagrad"),
         "column": (("column", "column", "column", "column"), "adagrad"),
         "mixed": (("row", "table", "column", "table"), "adagrad")}


def _batches(world: int) -> list[tuple[torch.Tensor, ...]]:
    """Global batches (dense, values, lengths [F, world*B], labels), one per step."""
    gen = torch.Generator().manual_seed(3)
    out = []
    for _ in range(STEPS):
        n = world * B
        lengths = torch.stack([torch.randint(0, h + 2, (n,), generator=gen) for h in CONFIG.multi_hot])
        values = torch.cat([torch.randint(0, r, (int(lengths[f].sum()),), generator=gen)
                            for f, r in enumerate(CONFIG.table_rows)])
        out.append((torch.randn(n, CONFIG.num_dense, generator=gen), values, lengths,
                    torch.randint(0, 2, (n,), generator=gen).float()))
    return out


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    return F.pad(torch.cumsum(lengths.reshape(-1), 0), (1, 0))


def _local(batch, rank: int):
    dense, values, lengths, labels = batch
    n = lengths.shape[1]
    starts = F.pad(torch.cumsum(lengths.reshape(-1), 0), (1, 0)).view(-1)[:-1].view(lengths.shape)
    pick = torch.cat([values[int(starts[f, rank * B]):int(starts[f, rank * B]) + int(lengths[f, rank * B:(rank + 1) * B].sum())]
                      for f in range(lengths.shape[0])])
    keep = slice(rank * B, (rank + 1) * B)
    assert n % B == 0
    return dense[keep], pick, _offsets(lengths[:, keep]), labels[keep]


def _train(model: DLRM, dense_loss, steps_batches, rank: int | None) -> list[float]:
    opt = torch.optim.Adagrad(model.dense_parameters(), lr=0.05)
    losses = []
    for batch in steps_batches:
        dense, values, offsets, labels = (_local(batch, rank) if rank is not None else
                                          (batch[0], batch[1], _offsets(batch[2]), batch[3]))
        emb = model.embed(values, offsets, dense.shape[0])
        leaf = emb.detach().requires_grad_()
        loss = dense_loss(dense, leaf, labels)
        loss.backward()
        emb.backward(leaf.grad)
        opt.step()
        opt.zero_grad()
        loss = loss.detach()
        losses.append(float(parallel.global_mean(loss)) if rank is not None else float(loss))
    return losses


def _model(kind: str) -> DLRM:
    return DLRM(CONFIG, embedding_backend="polyrec", embedding_optimizer=EmbeddingOptimConfig(kind=kind, lr=0.1), seed=1)


@contextmanager
def _counting_all_to_alls():
    """Count the calls of the all-to-alls the sharded embeddings use (DDP's all-reduce is not one)."""
    calls = {"n": 0}

    def wrap(fn):
        def counted(*args, **kwargs):
            calls["n"] += 1
            return fn(*args, **kwargs)
        return counted

    with (mock.patch.object(torch.distributed, "all_to_all_single", wrap(torch.distributed.all_to_all_single)),
          mock.patch.object(torch.distributed, "all_to_all", wrap(torch.distributed.all_to_all))):
        yield calls


def _check(rank: int, world: int) -> None:
    from polyrec.runtime.trainer import DenseLoss

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"), backend="gloo")
    for name, (kinds, kind) in KINDS.items():
        single = _model(kind)
        expected = _train(single, DenseLoss(single, torch.float32), _batches(world), None)
        start = _model(kind)
        shardings = [TableSharding(kind=k, ranks=(t % world,) if k == "table" else tuple(range(world)))
                     for t, k in enumerate(kinds)]
        opt = start.embeddings.tbe.optimizer
        sharded = DistributedEmbeddings(CONFIG.table_rows, CONFIG.embedding_dim, optimizer=opt, shardings=shardings,
                                        rank=rank, world_size=world, device=ctx.device, seed=1)
        with torch.no_grad():  # the single-process model's initial tables, sliced
            for view, s in zip(sharded.local.table_weights(), sharded.sharded.local_shards):
                view.copy_(start.embeddings.tbe.table_weights()[s.table][s.rows[0]:s.rows[1], s.cols[0]:s.cols[1]])
        model = DLRM(CONFIG, embedding_backend="polyrec", seed=1, embeddings=sharded)
        with _counting_all_to_alls() as calls:
            got = _train(model, parallel.data_parallel(DenseLoss(model, torch.float32), ctx), _batches(world), rank)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-5, atol=1e-6, msg=name)
        # 2 ranks: lengths, values, (weights,) pooled rows forward and back, each step; 1 rank: none.
        assert (calls["n"] == 0) if world == 1 else (calls["n"] >= 4 * STEPS), (name, world, calls["n"])


def test_sharded_model_with_ddp_matches_single_process():
    run_on_ranks(_check, 2)


def test_one_rank_sharded_model_matches_single_process_without_all_to_all():
    """torchrun with one process takes the sharded path: same losses, and no embedding collective."""
    run_on_ranks(_check, 1)


def _torchrun(nproc: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "-m", "polyrec", "train", *args]
    # a rank that aborts prints its Python stack (faulthandler), so a failure says where it stopped
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1"))


def _polyrec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyrec", "train", *args], capture_output=True, text=True,
                          timeout=240)


# one eval batch: the final evaluation's lookups run through the interpreter (~1 s a batch per rank)
COMMON = ["--preset", "dcnv2-small", "--row-cap", "64", "--batch-size", "16", "--device", "cpu",
          "--embedding-backend", "polyrec", "--dense-backend", "torch", "--log-every", "2", "--eval-batches", "1",
          "--json"]


def _result(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [x for x in lines if x.get("event") == "result"]
    assert len(results) == 1, "exactly one rank reports: " + proc.stdout[-2000:]
    return results[0]


def test_torchrun_trains_checkpoints_and_resumes_on_other_rank_counts(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = _result(_torchrun(2, *COMMON, "--steps", "4", "--checkpoint-dir", str(ckpt)))
    assert first["status"] == "done" and first["step"] == 4
    assert (ckpt / "checkpoint.pt").is_file() and len(list(ckpt.glob("embedding_shards-step4/emb-rank*.pt"))) == 2
    again = _result(_torchrun(2, *COMMON, "--steps", "6", "--checkpoint-dir", str(ckpt), "--resume"))
    assert again["step"] == 6 and not list(ckpt.glob("embedding_shards-step4"))  # old shards dropped
    one = _result(_torchrun(1, *COMMON, "--steps", "8", "--checkpoint-dir", str(ckpt), "--resume"))
    assert one["step"] == 8
    plain = _result(_polyrec(*COMMON, "--steps", "10", "--checkpoint-dir", str(ckpt), "--resume"))
    assert plain["step"] == 10 and plain["status"] == "done"


def test_torchrun_takes_the_plans_batch_row_dtype_and_shardings(tmp_path):
    from polyrec.planner.propose import make_plan
    from polyrec.planner.types import PlanConstraints, model_spec_from_config, parse_fleet

    config = preset("dcnv2-small").with_capped_rows(64)
    plan = make_plan(model_spec_from_config(config), parse_fleet("H200x2"),
                     PlanConstraints(weight_dtypes=("fp16",), batch_per_gpu=8, dense_dtype="fp32"))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    args = [a for a in COMMON if a not in ("--batch-size", "16")]
    proc = _torchrun(2, *args, "--steps", "2", "--plan", str(path))
    assert _result(proc)["status"] == "done"
    start = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event": "start"'))
    assert (start["config"]["batch_size"], start["config"]["embedding_dtype"]) == (8, "fp16")


def test_torch_backend_is_refused_on_several_ranks(tmp_path):
    proc = _torchrun(2, *[a if a != "polyrec" else "torch" for a in COMMON], "--steps", "2")
    assert proc.returncode != 0 and "polyrec's TBE" in proc.stderr + proc.stdout


def _resume_exactly(rank: int, world: int, ckpt: str) -> None:
    """2 steps, a checkpoint, 2 more; a trainer resumed from the checkpoint repeats the last 2 losses.
    On several ranks the trainer takes each batch one step ahead (its input distribution started):
    the checkpoint must hold the data position before that batch."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=4, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100, checkpoint_dir=ckpt)
    first = Trainer(cfg, progress=False)
    assert first._exchange_ahead == (world > 1)
    for _ in range(2):
        first.train_step()
    first.save()
    want = [float(first.train_step()) for _ in range(2)]
    again = Trainer(dataclasses.replace(cfg, resume=True), progress=False)
    got = [float(again.train_step()) for _ in range(2)]
    assert got == want, (rank, got, want)
    if world > 1:  # a distribution started for one batch is refused for another
        a, b = again.source.next_batch(), again.source.next_batch()
        started = again.model.embeddings.start_inputs(a.values, a.offsets, a.batch_size)
        with pytest.raises(ValueError, match="belongs to another batch"):
            again.model.embed(b.values, b.offsets, b.batch_size, started=started)


@pytest.mark.parametrize("world", [1, 2])
def test_resume_repeats_the_losses_when_batches_are_taken_ahead(tmp_path, world):
    run_on_ranks(_resume_exactly, world, str(tmp_path / "ckpt"))


def _with_and_without(spied: str, disabled: str, steps: int) -> tuple[list[bool], list[float], list[float]]:
    """``steps`` small CPU training steps recording, at each call of ``ShardedEmbedding.<spied>``, whether it
    returned something; then as many from the same seed with ``DistributedEmbeddings.<disabled>`` removed
    (the overlap off). Returns (those records, the losses with, the losses without)."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.sharding import ShardedEmbedding
    from polyrec.runtime.trainer import Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=steps, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100)
    real, returned = getattr(ShardedEmbedding, spied), []

    def spy(self, *args):
        out = real(self, *args)
        returned.append(out is not None)
        return out

    with mock.patch.object(ShardedEmbedding, spied, spy):
        trainer = Trainer(cfg, progress=False)
        with_it = [float(trainer.train_step()) for _ in range(steps)]
    with mock.patch.object(DistributedEmbeddings, disabled, None):
        trainer = Trainer(cfg, progress=False)
        without = [float(trainer.train_step()) for _ in range(steps)]
    return returned, with_it, without


def _steps_for(world: int) -> int:
    """Steps of ``_with_and_without``: four where something crosses ranks, two where nothing can (the
    interpreter's lookups make each step about a second)."""
    return 4 if world > 1 else 2


def _dense_step_during_the_gradient_exchange(rank: int, world: int) -> None:
    """On several ranks the dense optimizer steps while the embedding gradient crosses the all-to-all
    (``backward_overlapping``): every step, and the losses are bitwise those of stepping it after the
    embedding backward. On one rank nothing crosses and it steps after, as before."""
    steps = _steps_for(world)
    ran, overlapped, after = _with_and_without("_take_gradient_exchange_hook", "backward_overlapping", steps)
    assert ran == [world > 1] * steps * (world > 1), ran
    assert overlapped == after, (rank, overlapped, after)


@pytest.mark.parametrize("world", [1, 2])
def test_the_dense_optimizer_steps_during_the_gradient_exchange(world):
    run_on_ranks(_dense_step_during_the_gradient_exchange, world)


def _gradient_exchange_started_in_the_dense_backward(rank: int, world: int) -> None:
    """On several ranks the embedding gradient's all-to-all starts inside the dense backward, from the
    cross network's input gradient (``DLRM.embedding_grad_hook``), and the embedding backward takes
    that exchange every step; the losses are bitwise those of starting it in the embedding backward.
    On one rank nothing crosses and nothing is started."""
    steps = _steps_for(world)
    took, early, late = _with_and_without("take_started_gradient", "start_backward", steps)
    assert took == [True] * steps * (world > 1), took
    assert early == late, (rank, early, late)


@pytest.mark.parametrize("world", [1, 2])
def test_the_gradient_exchange_starts_inside_the_dense_backward(world):
    run_on_ranks(_gradient_exchange_started_in_the_dense_backward, world)


def _inputs_distributed_a_step_ahead(rank: int, world: int) -> None:
    """On several ranks each batch's ids are sent in the step before its own (``Trainer._send_inputs_ahead``):
    from the third step on, the lookup finds its batch already distributed; the losses are bitwise
    those with only the lengths a step ahead (``inputs_ahead`` = 1). (Resuming with batches taken
    ahead: ``test_resume_repeats_the_losses_when_batches_are_taken_ahead``.)"""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.sharding import ShardedEmbedding
    from polyrec.runtime.trainer import Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=5, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100)
    real, ready = ShardedEmbedding._send_inputs, []

    def spy(self, batch, started, bounds):
        ready.append(started is not None and started.local is not None)
        return real(self, batch, started, bounds)

    with mock.patch.object(ShardedEmbedding, "_send_inputs", spy):
        trainer = Trainer(cfg, progress=False)
        ahead = [float(trainer.train_step()) for _ in range(5)]
    assert ready == [False, False, True, True, True], ready
    assert len(trainer._ahead) == 2 and trainer._ahead[0][2].local is not None
    with mock.patch.object(Trainer, "inputs_ahead", 1):
        trainer = Trainer(cfg, progress=False)
        lengths_only = [float(trainer.train_step()) for _ in range(5)]
    assert ahead == lengths_only, (rank, ahead, lengths_only)


def test_inputs_are_distributed_a_step_ahead():
    run_on_ranks(_inputs_distributed_a_step_ahead, 2)


def _ddp_noting_the_last_bucket(rank: int, world: int) -> None:
    """``parallel.data_parallel(..., on_last_bucket=)`` (the trainer's signal for the tables' update
    stream): DDP takes the hook, calls it once per backward (small buckets, so there are several), and
    the averaged gradients are bitwise those of DDP without it."""
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"), backend="gloo")
    calls: list[int] = []

    def grads(hooked: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(5, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
        ddp = parallel.data_parallel(net, ctx, on_last_bucket=(lambda: calls.append(1)) if hooked else None)
        ddp.bucket_bytes_cap = 1024  # several buckets
        gen = torch.Generator().manual_seed(rank)
        for _ in range(3):
            ddp.zero_grad()
            ddp(torch.randn(7, 5, generator=gen)).square().sum().backward()
        return [p.grad.clone() for p in net.parameters()]

    with_hook, without = grads(True), grads(False)
    assert len(calls) == 3, calls
    assert all(torch.equal(a, b) for a, b in zip(with_hook, without))


def test_ddp_calls_the_last_bucket_hook_once_per_backward_and_averages_as_without():
    run_on_ranks(_ddp_noting_the_last_bucket, 2)


def test_skipped_bad_rows_are_counted_over_every_rank(tmp_path):
    """Rank 0 alone reports, and it reported its own count: the bad rows of the other ranks' blocks
    were skipped without a trace (criteo_bad.tsv: 4 bad rows, 2 in rank 1's blocks)."""
    data = os.path.join(os.path.dirname(__file__), "data", "criteo_bad.tsv")
    args = [a if a != "16" else "4" for a in COMMON]  # batch 4: every rank's blocks hold bad rows
    proc = _torchrun(2, *args, "--steps", "4", "--data", f"criteo:{data}", "--skip-bad-rows")
    assert _result(proc)["status"] == "done"
    end = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event": "end"'))
    assert end["bad_rows"] == 4 and len(end["bad_row_examples"]) == 4, end
    assert {e.split(":")[1] for e in end["bad_row_examples"]} == {"5", "10", "15", "18"}


def _signal_to_one_rank(rank: int, world: int, ckpt: str, signum: int) -> None:
    """SIGTERM (or Ctrl-C's SIGINT) reaches rank 1 alone after step 2 (`kill` of one worker; torchrun
    forwards it to one worker after another): every rank stops after the same step and the checkpoint is
    written. Rank 1 used to stop alone and wait in the checkpoint's collectives while rank 0 waited in
    the next step's (a hang until the 600 s collective timeout)."""
    import faulthandler
    import signal

    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    faulthandler.dump_traceback_later(180, exit=True)  # a hang fails the test (the group's timeout is 30 min)
    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=50, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100, checkpoint_dir=ckpt)
    trainer = Trainer(cfg, progress=False)
    step = trainer.train_step

    def signalled_step():
        loss = step()
        if rank == 1 and trainer.step == 2:
            trainer._on_signal(signum, None)
        return loss

    trainer.train_step = signalled_step
    result = trainer.train()
    assert (result.status, result.step) == ("sigterm", 3), (rank, result.status, result.step)
    name = signal.Signals(signum).name
    assert result.message.startswith(f"stopped by signal {signum} ({name}) at step 3"), result.message
    assert os.path.isfile(os.path.join(ckpt, "checkpoint.pt"))
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step(tmp_path, signum):
    run_on_ranks(_signal_to_one_rank, 2, str(tmp_path / "ckpt"), signum)


def _signal_to_one_rank_during_a_save(rank: int, world: int, ckpt: str) -> None:
    """SIGTERM reaches rank 1 alone while step 2's periodic checkpoint is written: every rank stops at
    step 2 with no second save (the step vote read it a step late: one more step and save)."""
    import faulthandler
    import signal

    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    faulthandler.dump_traceback_later(180, exit=True)
    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=50, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100, checkpoint_every=2,
                      checkpoint_dir=ckpt)
    trainer = Trainer(cfg, progress=False)
    save, saves = trainer.save, []

    def signalled_save():
        saves.append(trainer.step)
        out = save()
        if rank == 1:
            trainer._on_signal(signal.SIGTERM, None)
        return out

    trainer.save = signalled_save
    result = trainer.train()
    assert (result.status, result.step, saves) == ("sigterm", 2, [2]), (rank, result.status, result.step, saves)
    faulthandler.cancel_dump_traceback_later()


def test_a_signal_to_one_rank_during_a_save_stops_every_rank_after_it(tmp_path):
    run_on_ranks(_signal_to_one_rank_during_a_save, 2, str(tmp_path / "ckpt"))


def _resume_one_process_checkpoint(rank: int, world: int, ckpt: str, tables: list, states: list) -> None:
    """Each rank's shards hold the one-process run's rows and row-wise Adagrad state."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=6, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100, checkpoint_dir=ckpt,
                      resume=True)
    trainer = Trainer(cfg, progress=False)
    assert trainer.step == 3
    local = trainer.model.embeddings.local
    for shard, weights, state in zip(trainer.model.embeddings.sharded.local_shards, local.table_weights(),
                                     local.table_state()):
        rows, cols = slice(*shard.rows), slice(*shard.cols)
        assert torch.equal(weights, tables[shard.table][rows, cols]), shard
        assert torch.equal(state, states[shard.table][rows]), shard
    assert local.step == 3
    trainer.train_step()


def test_a_one_process_checkpoint_resumes_on_two_ranks(tmp_path):
    """A checkpoint of one process (unsharded tables) stopped a 2-rank resume with KeyError: 'shards'."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    ckpt = str(tmp_path / "ckpt")
    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=3, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=100, checkpoint_dir=ckpt)
    one = Trainer(cfg, progress=False)
    for _ in range(3):
        one.train_step()
    one.save()
    tbe = one.model.embeddings.tbe
    tables = [t.detach().clone() for t in tbe.table_weights()]
    states = [s.detach().clone() for s in tbe.table_state()]
    run_on_ranks(_resume_one_process_checkpoint, 2, ckpt, tables, states)


def _each_held_out_row_counted_once(rank: int, world: int, train: str, held_out: str, movielens: str) -> None:
    """Every rank scores the whole --eval-data file and the same MovieLens test split: gathered, each row
    was counted once per rank (`samples` 32 for the file's 16 rows scored). Synthetic eval batches are
    each rank's own: all of them count."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    common = dict(preset="dcnv2-small", row_cap=64, batch_size=8, steps=1, device="cpu", embedding_backend="polyrec",
                  dense_backend="torch", eval_batches=2)
    on_file = Trainer(TrainConfig(**common, data=f"mlperf:{train}", eval_data=f"mlperf:{held_out}"),
                      progress=False).evaluate()
    assert on_file["samples"] == 2 * 8, on_file  # 2 batches of 8 of the file's 32 records
    ml = Trainer(TrainConfig(**common, data=f"movielens:{movielens}"), progress=False)
    on_split = ml.evaluate()
    assert on_split["samples"] == len(ml.source.test_rows), on_split
    synthetic = Trainer(TrainConfig(**common), progress=False).evaluate()
    assert synthetic["samples"] == world * 2 * 8, synthetic
    seen = parallel.gather((on_file, on_split, synthetic))
    assert all(other == seen[0] for other in seen), seen  # every rank reports the same evaluation


def test_distributed_eval_counts_each_held_out_row_once(tmp_path):
    gen = torch.Generator().manual_seed(0)
    for name, n in (("train.bin", 64), ("eval.bin", 32)):
        records = torch.cat([torch.randint(0, 2, (n, 1), generator=gen), torch.randint(0, 50, (n, 13), generator=gen),
                             torch.randint(0, 10**6, (n, 26), generator=gen)], 1)  # MLPerf: label, counts, ids
        records.to(torch.int32).numpy().tofile(tmp_path / name)
    movielens = os.path.join(os.path.dirname(__file__), "data", "ml_sample.data")
    run_on_ranks(_each_held_out_row_counted_once, 2, str(tmp_path / "train.bin"), str(tmp_path / "eval.bin"), movielens)
