"""A file source whose next batch is read on a background thread while the training step runs (:class:`Prefetching`).

The readers build each batch on the host with numpy, which releases the GIL in its loops: a 65536-row MLPerf
multi-hot batch took 0.056-0.073 s to read on an H100 host, against a 23.7 ms step on synthetic data
(``benchmarks/results/multihot_reader_2026-12-05/``). Read ahead, that time hides behind the step.

The wrapper keeps the wrapped source's semantics exactly: the same batches in the same order; ``state_dict`` and
``bad_rows`` as they were after the last batch the caller took (the thread records them right after reading each
batch and hands them over with it), so checkpoints and the end-of-run report equal an unwrapped run's; an error
raised while reading ahead is raised by the ``next_batch`` that would have returned that batch, the source put back
to that batch's start (the file sources do it themselves on a DataError: ``types.keeping_position``; the wrapper
does it on any error, such as a failed pin). Nothing is read ahead before the first ``next_batch``;
``load_state_dict`` and ``close`` stop the thread and put the source back where the caller is, so reading on
continues from there. An interrupt (a second Ctrl-C while a run stops) inside ``next_batch`` only cancels the thread (a
join could wait on a read that never ends); one inside a stop leaves it unfinished: the next ``next_batch``, ``close``
or ``load_state_dict`` finishes it first, so no batch is lost and no call waits on a thread that has ended. For a
CUDA device the thread also puts each batch in page-locked memory (``pin``), so that its copy to the device does not
hold the training thread (about 10 ms of a step on a multi-hot day from pageable memory,
``benchmarks/results/multihot_reader_2026-12-05b/``), and with ``device`` moves it there itself, on a stream of its
own, so that the copy (73 MB of a 65536-row MLPerf multi-hot batch) and the ids' remainders (``Batch.mod_rows``) run
beside the step before: the batch taken is on the device, and the caller's stream waits for its copy (an event).
A CUDA graph capture fails on another thread's CUDA calls (an allocation, a copy: "operation failed due to a previous
error during capture"): the caller captures within ``quiet()``, which waits for the read in progress and holds the
next until the capture ends.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from polyrec.data.types import BadRows, Batch, Closing, Source
from polyrec.models.config import ModelConfig


@dataclass(kw_only=True, slots=True)
class _Read:
    """One batch read ahead with the source's position and bad rows right after it, or the error reading it raised."""

    batch: Batch | None = None
    state: dict | None = None  # ``Source.state_dict()`` after the batch
    bad_rows: BadRows | None = None  # a copy of the source's count after the batch
    error: BaseException | None = None
    landed: torch.cuda.Event | None = None  # where the batch was moved to a device: its copy's end on that stream


def _copied(bad: BadRows) -> BadRows:
    return BadRows(skip=bad.skip, count=bad.count, examples=list(bad.examples))


class _ReadAhead:
    """One thread reading ``source``'s batches in order, at most ``depth`` of them ahead of those taken; it ends
    after the first error, handed over in place of its batch. ``device`` (CUDA): each batch moved there on the
    thread's own stream."""

    def __init__(self, source: Source, depth: int, pin: bool, device: torch.device | None,
                 reading: threading.Lock) -> None:
        self.pin, self.device, self.reading = pin, device, reading
        self.stream = torch.cuda.Stream(device) if device is not None else None
        self.ready: queue.SimpleQueue[_Read] = queue.SimpleQueue()
        self.slots = threading.Semaphore(depth)  # batches it may read before the caller takes one
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(source,), name="polyrec-prefetch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self, source: Source) -> None:
        with torch.cuda.device(self.device) if self.device is not None else contextlib.nullcontext():
            while True:
                self.slots.acquire()
                if self.stopping.is_set():
                    return
                try:
                    with self.reading:
                        read = self._read(source)
                except BaseException as exc:  # any error, handed to the caller: nothing is lost on this thread
                    self.ready.put(_Read(error=exc))
                    return
                self.ready.put(read)

    def _read(self, source: Source) -> _Read:
        """The next batch with the source's state after it: pinned where asked, and moved to ``device`` on the
        thread's stream (the page-locked batch is freed once its copy is done: the pinned allocator waits for it)."""
        batch = source.next_batch()
        read = _Read(batch=batch.pinned() if self.pin else batch, state=source.state_dict(),
                     bad_rows=_copied(source.bad_rows))
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                read.batch = read.batch.to(self.device, non_blocking=True)
                read.landed = self.stream.record_event()
        return read

    def take(self) -> _Read:
        """The next batch read (waiting for it), its slot given back to the thread."""
        read = self.ready.get()
        self.slots.release()
        return read

    def cancel(self) -> None:
        """Ask the thread to end once its current read is done (it reads nothing more)."""
        self.stopping.set()
        self.slots.release()  # wakes it where it waits for a slot

    def stop(self) -> None:
        """End the thread and wait for it (if it started); what it read ahead is dropped."""
        self.cancel()
        if self.thread.is_alive():
            self.thread.join()


class Prefetching(Closing):
    """``source`` (a file source) read ``depth`` batches ahead on a background thread (see the module docstring);
    ``pin``: each batch read ahead is put in page-locked memory there (``Batch.pinned``), for a CUDA device;
    ``device`` (CUDA, with ``pin``): and moved to it there."""

    def __init__(self, source: Source, depth: int = 1, pin: bool = False, device: torch.device | None = None) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, got {depth}")
        if device is not None and (device.type != "cuda" or not pin):
            raise ValueError(f"prefetch moves batches to a CUDA device from page-locked memory (pin=True); got "
                             f"device {device}, pin={pin}")
        self.source, self.depth, self.pin, self.device = source, depth, pin, device
        self._reading = threading.Lock()  # held by the thread through each read (``quiet``)
        if pin and hasattr(source, "build_pinned"):  # the source writes its largest arrays page-locked itself
            source.build_pinned()
        self.eval_bad_rows = source.eval_bad_rows  # the eval file's, read on the caller's thread only
        self.eval_rows_per_rank = source.eval_rows_per_rank
        self._ahead: _ReadAhead | None = None  # None: the source is where the caller is, nothing read ahead
        # the last batch taken from ``_ahead`` with the state after it (before the first: the state the thread started
        # from); None: no thread since the source was put back where the caller is
        self._taken: _Read | None = None
        self._cancel: weakref.finalize | None = None  # ends the thread when this wrapper is collected unclosed

    @property
    def bad_rows(self) -> BadRows:
        """The bad rows skipped up to the last batch taken: none of a batch read ahead."""
        return self.source.bad_rows if self._taken is None else self._taken.bad_rows

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return self.source.adapt(config)

    def next_batch(self) -> Batch:
        try:
            if self._ahead is None or self._ahead.stopping.is_set():
                self._start()
            read = self._ahead.take()
        except BaseException:  # an interrupt: the batch taken, its slot and the thread may be anywhere; the next
            if self._ahead is not None:  # call or close puts the source back where the caller is (no join here:
                self._ahead.cancel()  # a read that never ends must not hold Ctrl-C)
            raise
        if read.error is not None:  # the thread has ended; the source goes back to the failed batch's start
            self._halt()  # a DataError left it there (``keeping_position``); a failed ``pinned`` after the batch
            raise read.error
        self._taken = read
        if read.landed is not None:  # on the device: the caller's stream waits for the copy, and holds the tensors
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(read.landed)
            batch = read.batch
            for tensor in (batch.dense, batch.values, batch.offsets, batch.labels):  # made on the thread's stream: not
                tensor.record_stream(stream)  # handed out again before ``stream`` is done with them
        return read.batch

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Within: the thread makes no call, on the host or the device (it finishes the read in progress first, and
        starts the next after): for a CUDA graph capture."""
        with self._reading:
            yield

    def eval_batches(self) -> list[Batch] | None:
        return self.source.eval_batches()  # the eval file's own source: apart from what the thread reads

    def state_dict(self) -> dict:
        return copy.deepcopy(self._taken.state) if self._taken is not None else self.source.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Stop reading ahead and continue from ``state``; the thread starts again at the next ``next_batch``."""
        self._halt()
        self.source.load_state_dict(state)

    def close(self) -> None:
        """Stop the thread (joined) and close the source, put back at the last batch taken."""
        self._halt()
        self.source.close()

    def _start(self) -> None:
        """A thread reading on from where the caller is. A stop that an interrupt cut short (in ``close``,
        ``load_state_dict``, ``next_batch``) is finished first: its thread joined, the source put back."""
        self._halt()
        self._taken = _Read(state=self.source.state_dict(), bad_rows=_copied(self.source.bad_rows))
        ahead = _ReadAhead(self.source, self.depth, self.pin, self.device, self._reading)
        self._cancel = weakref.finalize(self, ahead.cancel)
        self._ahead = ahead
        ahead.start()  # last: an interrupt before leaves no thread that nothing would end

    def _halt(self) -> None:
        """End the thread and put the source back after the last batch taken (what was read ahead is dropped)."""
        self._end_thread()
        if self._taken is not None:
            self.source.load_state_dict(self._taken.state)
            self._taken = None

    def _end_thread(self) -> None:
        if self._ahead is not None:
            self._ahead.stop()  # an interrupt here keeps ``_ahead``: the next stop or start joins it again
            self._cancel.detach()
            self._ahead = None
