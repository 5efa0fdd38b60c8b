"""``polyrec.data.prefetch.Prefetching``: a file source read ahead on a background thread gives what the unwrapped
source gives (batches, positions, errors at the batch that holds them, bad-row counts), leaves no thread behind, and
a Trainer trains bit for bit as without it, on one rank and on two."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from distributed_util import criteo_file, run_on_ranks
from polyrec.cli import app
from polyrec.data import BadRows, Batch, DataError, Prefetching, Source, open_source
from polyrec.runtime import TrainConfig, Trainer
from test_data import small
from test_data_mlperf_multihot import bad_day, write_day

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")
THREAD = "polyrec-prefetch"  # the reading thread's name (``prefetch._ReadAhead``)


def criteo(path: Path = DATA / "criteo_sample.tsv", *, skip: bool = False, prefetch: bool = False,
           batch: int = 10) -> Source:
    return open_source(f"criteo:{path}", small(), batch_size=batch, seed=0, device=CPU, skip_bad_rows=skip,
                       prefetch=prefetch)


def multihot(directory: Path, *, skip: bool = False, prefetch: bool = False, batch: int = 4) -> Source:
    days = ",".join(str(p) for p in sorted(directory.glob("day_*_sparse_multi_hot.npz")))
    return open_source(f"mlperf:{days}", small(), batch_size=batch, seed=0, device=CPU, skip_bad_rows=skip,
                       prefetch=prefetch)


def two_days(directory: Path) -> Path:
    write_day(directory, 0, 10, seed=1)
    write_day(directory, 1, 7, seed=2)
    return directory


def assert_same(got: Batch, want: Batch) -> None:
    for name in ("dense", "values", "offsets", "labels"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name


@pytest.fixture(params=["criteo", "multihot"])
def opened(request, tmp_path) -> Callable[..., Source]:
    """A kind of file source, opened with open_source's keywords (``prefetch``, ``skip``)."""
    if request.param == "criteo":
        return criteo
    days = two_days(tmp_path)
    return lambda **kw: multihot(days, **kw)


def prefetch_threads(earlier: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """The reading threads alive now, but ``earlier``."""
    return [t for t in threading.enumerate() if t.name == THREAD and t not in earlier]


@pytest.fixture
def threads() -> Callable[[], list[threading.Thread]]:
    """``prefetch_threads`` of this test: not those other tests' unclosed sources left running."""
    earlier = frozenset(prefetch_threads())
    return lambda: prefetch_threads(earlier)


def wait_read_ahead(ahead: Prefetching) -> None:
    """Wait until the thread has read the batch after the last one taken (the wrapped source is past the caller)."""
    deadline = time.monotonic() + 30
    while ahead.source.state_dict() == ahead.state_dict():
        assert time.monotonic() < deadline, "nothing read ahead"
        time.sleep(0.001)


# --- the wrapper ------------------------------------------------------------------------------------------

def test_open_source_wraps_file_sources_only(tmp_path):
    assert isinstance(criteo(prefetch=True), Prefetching) and not isinstance(criteo(), Prefetching)
    assert isinstance(multihot(two_days(tmp_path), prefetch=True), Prefetching)
    synthetic = open_source("synthetic", small(), batch_size=8, seed=0, device=CPU, prefetch=True)
    movielens = open_source(f"movielens:{DATA / 'ml_sample.inter'}", small(), batch_size=8, seed=0, device=CPU,
                            prefetch=True)
    assert not isinstance(synthetic, Prefetching) and not isinstance(movielens, Prefetching)


def test_the_batches_are_the_unwrapped_sources_over_epochs(opened, threads):
    plain, ahead = opened(), opened(prefetch=True)
    with plain, ahead:
        for _ in range(12):  # criteo: 48 rows in batches of 10; multihot: 17 rows in batches of 4
            assert_same(ahead.next_batch(), plain.next_batch())
    assert not threads()


def test_the_position_is_after_the_last_batch_taken_and_resumes_the_same(opened):
    plain, ahead = opened(), opened(prefetch=True)
    with plain, ahead:
        for _ in range(9):
            state = ahead.state_dict()
            assert state == plain.state_dict()
            with opened(prefetch=True) as resumed:
                resumed.load_state_dict(state)
                following = [resumed.next_batch() for _ in range(3)]
            with opened() as want:
                want.load_state_dict(state)
                for got in following:
                    assert_same(got, want.next_batch())
            assert_same(ahead.next_batch(), plain.next_batch())
            wait_read_ahead(ahead)


def test_loading_a_position_while_reading_ahead_reads_on_from_it(opened, threads):
    plain, ahead = opened(), opened(prefetch=True)
    with plain, ahead:
        start = ahead.state_dict()
        for _ in range(3):
            ahead.next_batch()
        wait_read_ahead(ahead)
        ahead.load_state_dict(start)  # as the precompile's dry run puts it back
        assert ahead.state_dict() == start and not threads()
        for _ in range(5):
            assert_same(ahead.next_batch(), plain.next_batch())


def test_nothing_is_read_before_the_first_next_batch(opened, threads):
    with opened(prefetch=True) as ahead, opened() as plain:
        ahead.adapt(small())
        assert ahead.state_dict() == plain.state_dict() and not threads()
        ahead.next_batch()
        assert threads()


def test_close_joins_the_thread_and_reading_on_continues_where_the_caller_was(opened, threads):
    with opened() as plain:
        want = [plain.next_batch() for _ in range(5)]
    ahead = opened(prefetch=True)
    got = [ahead.next_batch() for _ in range(3)]
    wait_read_ahead(ahead)
    ahead.close()
    assert not threads()
    got += [ahead.next_batch() for _ in range(2)]  # reopened where it stopped, not after the batch read ahead
    ahead.close()
    assert not threads()
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)


def test_a_collected_wrapper_ends_its_thread(threads):
    ahead = criteo(prefetch=True)
    ahead.next_batch()
    [thread] = threads()
    del ahead
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Prefetching(criteo(), depth=0)


# --- bad rows ---------------------------------------------------------------------------------------------

def bad_readers(tmp_path: Path) -> dict[str, Callable[..., Source]]:
    """criteo_bad.tsv (lines 5, 10, 15, 18 bad; 16 good rows) and a multi-hot day of 12 rows (rows 3, 6, 9 bad)."""
    (tmp_path / "bad").mkdir()
    bad_day(tmp_path / "bad")
    return {"criteo": lambda **kw: criteo(DATA / "criteo_bad.tsv", batch=4, **kw),
            "multihot": lambda **kw: multihot(tmp_path / "bad", batch=3, **kw)}


def until_error(source: Source) -> tuple[list[Batch], DataError]:
    """The batches ``source`` gives before its first DataError, and that error."""
    batches = []
    while True:
        try:
            batches.append(source.next_batch())
        except DataError as exc:
            return batches, exc


@pytest.mark.parametrize("kind", ["criteo", "multihot"])
def test_a_bad_row_raises_at_the_batch_that_holds_it_from_that_batchs_start(tmp_path, kind, threads):
    opened = bad_readers(tmp_path)[kind]
    plain, ahead = opened(), opened(prefetch=True)
    with plain, ahead:
        (want, error), (got, raised) = until_error(plain), until_error(ahead)
        assert len(got) == len(want) and str(raised) == str(error)
        for g, w in zip(got, want):
            assert_same(g, w)
        assert ahead.state_dict() == plain.state_dict()  # the failed batch's start: a resume reads it whole
        assert not threads()
        (_, again), (_, again_plain) = until_error(ahead), until_error(plain)  # the same row, asked again
        assert str(again) == str(again_plain) == str(error) and ahead.state_dict() == plain.state_dict()


@pytest.mark.parametrize("kind", ["criteo", "multihot"])
def test_skipped_bad_rows_are_counted_as_unwrapped_at_every_step(tmp_path, kind):
    opened = bad_readers(tmp_path)[kind]
    plain, ahead = opened(skip=True), opened(skip=True, prefetch=True)
    with plain, ahead:
        for _ in range(9):  # over two epochs
            assert isinstance(ahead.bad_rows, BadRows)
            assert (ahead.bad_rows.count, ahead.bad_rows.examples) == (plain.bad_rows.count, plain.bad_rows.examples)
            assert ahead.state_dict() == plain.state_dict()
            assert_same(ahead.next_batch(), plain.next_batch())
            wait_read_ahead(ahead)  # the next batch's bad rows counted by the wrapped source, not yet by the caller
    assert plain.bad_rows.count > 0


# --- the trainer ------------------------------------------------------------------------------------------

def train_config(tmp: Path, steps: int, **kw) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_sample.tsv'}", steps=steps, batch_size=16,
                       row_cap=2000, log_every=1, checkpoint_dir=tmp, device="cpu", cpu_threads=1, **kw)


def assert_same_state(got: object, want: object, where: str = "checkpoint") -> None:
    """Nested checkpoint states equal: tensors bit for bit, everything else by ==."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            assert_same_state(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_state(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def checkpoint(directory: Path) -> dict:
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    for name in ("prefetch", "checkpoint_dir"):  # the option itself, and each run's own directory
        state["train_config"].pop(name)
    return state


def test_the_trainer_trains_and_saves_the_same_with_and_without_prefetch(tmp_path, threads):
    """Bit-identical losses, evaluations and checkpoints (criteo_sample.tsv: 48 rows, 3 batches an epoch), and a
    checkpoint of either resumes under the other as a run that never stopped."""
    runs = {on: Trainer(train_config(tmp_path / str(on), 7, prefetch=on, eval_every=3), progress=False).train()
            for on in (True, False)}
    assert runs[True].losses == runs[False].losses and len(runs[True].losses) == 7
    assert runs[True].evals == runs[False].evals
    assert_same_state(checkpoint(tmp_path / "True"), checkpoint(tmp_path / "False"))
    assert not threads()
    straight = runs[True].losses
    for on in (True, False):
        first = Trainer(train_config(tmp_path / f"half-{on}", 4, prefetch=on), progress=False).train()
        resumed = Trainer(train_config(tmp_path / f"half-{on}", 7, prefetch=not on, resume=True),
                          progress=False).train()
        assert first.losses + resumed.losses == straight


def test_skipped_bad_rows_are_reported_and_saved_the_same_with_and_without_prefetch(tmp_path):
    runs = {on: Trainer(dataclasses.replace(train_config(tmp_path / str(on), 5, prefetch=on, skip_bad_rows=True),
                                            data=f"criteo:{DATA / 'criteo_bad.tsv'}", batch_size=4),
                        progress=False).train() for on in (True, False)}
    assert runs[True].losses == runs[False].losses
    assert (runs[True].bad_rows, runs[True].bad_row_examples) == (runs[False].bad_rows, runs[False].bad_row_examples)
    assert runs[True].bad_rows == 4
    assert_same_state(checkpoint(tmp_path / "True"), checkpoint(tmp_path / "False"))


def test_a_bad_row_stops_the_trainer_at_the_same_step_with_the_same_checkpoint(tmp_path, threads):
    stops = {}
    for on in (True, False):
        trainer = Trainer(dataclasses.replace(train_config(tmp_path / str(on), 5, prefetch=on),
                                              data=f"criteo:{DATA / 'criteo_bad.tsv'}", batch_size=4), progress=False)
        with pytest.raises(DataError, match="criteo_bad.tsv:5: expected 40 tab-separated columns") as raised:
            trainer.train()
        stops[on] = (trainer.step, str(raised.value).replace(str(tmp_path / str(on)), "DIR"))
    assert stops[True] == stops[False] and stops[True][0] == 1
    assert_same_state(checkpoint(tmp_path / "True"), checkpoint(tmp_path / "False"))
    assert not threads()


def test_prefetch_is_an_option_of_polyrec_train():
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--prefetch" in result.output and "--no-prefetch" in result.output
    assert TrainConfig().prefetch is True


# --- two ranks --------------------------------------------------------------------------------------------

def _stop_on_rank_1s_bad_row(rank: int, world: int, data: str, ckpt: str) -> None:
    """A bad row in rank 1's 5th block (line 149, batch 16): both ranks stop after step 4 with prefetch on and off,
    the same checkpoint saved."""
    stopped = {}
    for on in (True, False):
        cfg = TrainConfig(preset="dcnv2-small", data=f"criteo:{data}", row_cap=64, batch_size=16, steps=8,
                          log_every=1, device="cpu", embedding_backend="polyrec", dense_backend="torch",
                          checkpoint_dir=Path(ckpt) / str(on), prefetch=on)
        trainer = Trainer(cfg, progress=False)
        assert isinstance(trainer.source, Prefetching) == on
        with pytest.raises(DataError, match=":149: expected 40 tab-separated columns"):
            trainer.train()
        stopped[on] = trainer.step
        assert not prefetch_threads()
    assert stopped == {True: 4, False: 4}, (rank, stopped)
    if rank == 0:
        assert_same_state(checkpoint(Path(ckpt) / "True"), checkpoint(Path(ckpt) / "False"))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_a_bad_row_of_one_rank_stops_every_rank_after_the_same_step_with_prefetch(tmp_path):
    data = tmp_path / "train.tsv"
    criteo_file(data, 400, bad=148)
    run_on_ranks(_stop_on_rank_1s_bad_row, 2, str(data), str(tmp_path / "ckpt"))


def test_batches_are_pinned_for_a_cuda_device_only():
    """Page-locked batches are for an asynchronous copy to a CUDA device; on the CPU they would cost a copy for
    nothing (and pinning needs CUDA): tests/gpu/test_prefetch_gpu.py checks the CUDA side."""
    source = criteo(prefetch=True)
    assert isinstance(source, Prefetching) and source.pin is False
    assert not source.next_batch().values.is_pinned()
    source.close()


def test_reading_ahead_for_a_cuda_device_has_the_multi_hot_reader_build_its_ids_page_locked(tmp_path):
    """``Prefetching(pin=True)`` asks the source to write each batch's ids (56 MB of a 65536-row MLPerf batch)
    into page-locked memory itself (``RecordSource.build_pinned``), so that ``Batch.pinned`` copies only the small
    rest; without pin, or for a source that cannot, nothing changes (on the GPU: tests/gpu/test_prefetch_gpu.py)."""
    two_days(tmp_path)
    plain = multihot(tmp_path)
    assert not plain.records.pinned_ids
    ahead = Prefetching(multihot(tmp_path), pin=False)
    assert not ahead.source.records.pinned_ids
    ahead.close()
    ahead = Prefetching(multihot(tmp_path), pin=True)  # nothing is read (a CPU machine cannot pin): the flag alone
    assert ahead.source.records.pinned_ids
    ahead.close()
    Prefetching(criteo(), pin=True).close()  # a source without build_pinned: taken as before


def test_moving_batches_to_a_device_needs_cuda_and_page_locked_batches():
    with pytest.raises(ValueError, match=r"prefetch moves batches to a CUDA device from page-locked memory "
                                         r"\(pin=True\); got device cpu, pin=True"):
        Prefetching(criteo(), pin=True, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="got device cuda, pin=False"):
        Prefetching(criteo(), device=torch.device("cuda"))
