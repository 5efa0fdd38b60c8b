"""``polyrec.data.prefetch.Prefetching`` where the caller is interrupted while it waits for a batch, and where a batch
read ahead fails after the source gave it (pinning): the position is still the unwrapped source's, at the last batch
taken."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from polyrec.data import Batch, Prefetching, Source
from test_data_prefetch import assert_same, criteo, prefetch_threads, threads, wait_read_ahead  # noqa: F401 (fixture)


class Gated:
    """``source`` whose ``next_batch`` waits for ``gate`` (``reading`` set once one waits); all else is the source's."""

    def __init__(self, source: Source) -> None:
        self.source, self.gate, self.reading = source, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.source, name)

    def next_batch(self) -> Batch:
        self.reading.set()
        self.gate.wait()
        return self.source.next_batch()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def ctrl_c_once(reading: threading.Event) -> Iterator[None]:
    """A KeyboardInterrupt in this (the main) thread once ``reading`` is set, as Ctrl-C while it waits for a batch."""
    previous = signal.signal(signal.SIGUSR1, _interrupt)
    main = threading.main_thread().ident

    def send() -> None:
        reading.wait()
        time.sleep(0.05)  # the caller waiting in next_batch by now
        signal.pthread_kill(main, signal.SIGUSR1)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        yield
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, previous)


def test_an_interrupt_while_waiting_for_the_first_batch_leaves_the_position_at_the_start():
    with criteo() as plain:
        start, want = plain.state_dict(), [plain.next_batch() for _ in range(2)]
    gated = Gated(criteo())
    ahead = Prefetching(gated)
    with ctrl_c_once(gated.reading), pytest.raises(KeyboardInterrupt):
        ahead.next_batch()
    gated.gate.set()  # the thread reads on: the wrapped source goes past the caller
    deadline = time.monotonic() + 30
    while gated.source.state_dict() == start:
        assert time.monotonic() < deadline, "nothing read ahead"
        time.sleep(0.001)
    assert ahead.state_dict() == start and ahead.bad_rows.count == 0  # no batch taken
    ahead.close()
    assert not prefetch_threads()
    assert ahead.state_dict() == start
    got = [ahead.next_batch() for _ in range(2)]
    ahead.close()
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)


def test_a_batch_that_fails_to_pin_raises_from_its_start():
    """``Batch.pinned`` needs CUDA: on the CPU it fails after the source gave the batch."""
    with criteo() as plain:
        for _ in range(2):
            plain.next_batch()
        start, want = plain.state_dict(), plain.next_batch()
    ahead = Prefetching(criteo())
    for _ in range(2):
        ahead.next_batch()
    ahead.close()
    ahead.pin = True
    with pytest.raises(RuntimeError):
        ahead.next_batch()
    assert ahead.state_dict() == start  # a resume from here reads the batch that failed
    ahead.pin = False
    assert_same(ahead.next_batch(), want)
    ahead.close()
    assert not prefetch_threads()


# --- an interrupt in the wrapper's own bookkeeping (a second Ctrl-C while a run stops) -------------------------


def within(seconds: float, call: Callable[[], Batch]) -> Batch:
    """``call()``, failed if not returned within ``seconds`` (a read that waits for a thread that never gives)."""
    got: list[Batch] = []
    worker = threading.Thread(target=lambda: got.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert got, f"no batch within {seconds} s: the wrapper hangs"
    return got[0]


class OnceInterrupted:
    """Calls ``call`` (``before``: first) raising KeyboardInterrupt on the first call only: Ctrl-C at that point."""

    def __init__(self, call: Callable, *, before: bool) -> None:
        self.call, self.before, self.fired = call, before, False

    def __call__(self, *args: object) -> object:
        if self.fired:
            return self.call(*args)
        self.fired = True
        if self.before:
            raise KeyboardInterrupt
        self.call(*args)
        raise KeyboardInterrupt


def batches_after_two() -> list[Batch]:
    with criteo() as plain:
        return [plain.next_batch() for _ in range(4)][2:]


def two_taken() -> Prefetching:
    ahead = Prefetching(criteo())
    for _ in range(2):
        ahead.next_batch()
    return ahead


def reads_on_as_unwrapped(ahead: Prefetching, want: list[Batch], threads: Callable[[], list]) -> None:
    """The interrupted wrapper's next batches are ``want`` (none lost, none waited for forever), and close leaves no
    thread."""
    for w in want:
        assert_same(within(10, ahead.next_batch), w)
    ahead.close()
    assert not threads()


def test_an_interrupt_right_after_a_batch_left_the_queue_loses_no_batch_and_hangs_nothing(threads):
    want, ahead = batches_after_two(), two_taken()
    ready = ahead._ahead.ready

    class Leaky:  # its get hands the batch over, then the interrupt comes before the slot is given back
        get = OnceInterrupted(ready.get, before=False)
        put = ready.put

    ahead._ahead.ready = Leaky()
    with pytest.raises(KeyboardInterrupt):
        ahead.next_batch()
    reads_on_as_unwrapped(ahead, want, threads)


def test_an_interrupt_while_close_joins_the_thread_leaves_reading_on_where_the_caller_was(threads):
    want, ahead = batches_after_two(), two_taken()
    wait_read_ahead(ahead)
    thread = ahead._ahead.thread
    thread.join = OnceInterrupted(thread.join, before=True)
    with pytest.raises(KeyboardInterrupt):
        ahead.close()
    reads_on_as_unwrapped(ahead, want, threads)


def test_an_interrupt_before_close_puts_the_source_back_leaves_reading_on_where_the_caller_was(threads):
    want, ahead = batches_after_two(), two_taken()
    wait_read_ahead(ahead)
    ahead.source.load_state_dict = OnceInterrupted(ahead.source.load_state_dict, before=True)
    with pytest.raises(KeyboardInterrupt):
        ahead.close()
    assert ahead.state_dict() != ahead.source.state_dict()  # the source is still past the caller
    reads_on_as_unwrapped(ahead, want, threads)


class Slow:
    """``source`` whose ``next_batch`` takes a while, ``in_read`` set meanwhile; all else is the source's."""

    def __init__(self, source: Source) -> None:
        self.source, self.in_read = source, threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.source, name)

    def next_batch(self) -> Batch:
        self.in_read.set()
        try:
            time.sleep(0.01)
            return self.source.next_batch()
        finally:
            self.in_read.clear()


def test_no_read_runs_within_quiet():
    """``Prefetching.quiet`` (a CUDA graph capture's: another thread's CUDA calls fail it) holds the reading thread:
    while a caller takes batch after batch, no read is in progress at any moment within it, and reading goes on
    after it."""
    slow = Slow(criteo())
    ahead = Prefetching(slow)
    taken: list[Batch] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            taken.append(ahead.next_batch())

    consumer = threading.Thread(target=consume)
    consumer.start()
    seen: list[bool] = []  # whether a read was in progress, at each look within quiet
    try:
        for _ in range(10):
            with ahead.quiet():
                before = len(taken)
                deadline = time.monotonic() + 0.03
                while time.monotonic() < deadline:
                    seen.append(slow.in_read.is_set())
                    time.sleep(0.001)
                assert len(taken) <= before + 1  # at most the batch read ahead before it was taken meanwhile
            time.sleep(0.03)
    finally:
        stop.set()
        consumer.join()
        ahead.close()
    assert seen and not any(seen) and len(taken) >= 2
