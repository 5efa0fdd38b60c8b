"""Training metrics: AUC, per-phase timing without per-step device syncs, and a JSON-lines log."""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

import torch

from polyrec import jsontext

PHASES = ("data", "emb_fwd", "dense", "emb_bwd", "optimizer")
"""Timed parts of a step: data loading/generation, embedding forward, dense forward+backward (loss
included), embedding backward (with the fused update for polyrec's TBE), optimizer steps."""


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """ROC AUC of scores [N] against labels [N] in {0, 1} (torchmetrics' binary AUROC); NaN where it is
    undefined: labels of one class (or none), or a NaN score (torchmetrics gives 0.0 for the first and
    up to 1.0 for the second). torchmetrics is imported here, on the first evaluation: it brings matplotlib in, half
    a second of every ``polyrec`` command's start (``hw``, ``plan``, ``migrate`` never take an AUC)."""
    from torchmetrics.functional.classification import binary_auroc

    labels = labels.long()
    if labels.numel() == 0 or bool(labels.min() == labels.max()) or bool(scores.isnan().any()):
        return math.nan
    return float(binary_auroc(scores.float(), labels))


class PhaseTimer:
    """Accumulates time per phase. On a GPU, CUDA events (on the stream each phase runs on) are read only
    at :meth:`flush` (one device sync); the host's own time in each phase is kept beside them
    (:meth:`per_step_host_ms`): in a host-bound step the events of a phase can fire late, behind the
    previous phase's queued kernels, and shorten it."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        # the device's index, so that each mark asks for its current stream without torch's device lookup:
        # current_stream() took 16.3 us per call, current_stream(index) 3.7 us, on the H200 machine's host;
        # 11 marks per step (benchmarks/results/host_side_probes_2026-12-01_s21/timer_mark_*.json)
        self.index = (device.index if device.index is not None else torch.cuda.current_device()) if self.cuda else None
        self.pending: list[tuple[str, Any, Any]] = []
        self.totals: dict[str, float] = defaultdict(float)  # seconds
        self.host_totals: dict[str, float] = defaultdict(float)  # seconds the host spent issuing each phase
        self._open: tuple[str, Any] | None = None
        self.boundaries: list[Any] = []  # step starts (and the last step's end), see step_boundary

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.index))
        return event

    def start(self, phase: str) -> None:
        self._open = (phase, self._mark(), time.perf_counter())

    def stop(self) -> None:
        phase, begin, host_begin = self._open
        self.pending.append((phase, begin, self._mark()))
        self.host_totals[phase] += time.perf_counter() - host_begin
        self._open = None

    def flush(self) -> dict[str, float]:
        """Fold the recorded marks into the totals; return the totals (seconds)."""
        if self.cuda and self.pending:
            torch.cuda.synchronize()  # phases may sit on two streams: wait for both
        for phase, begin, end in self.pending:
            self.totals[phase] += begin.elapsed_time(end) / 1e3 if self.cuda else end - begin
        self.pending.clear()
        return dict(self.totals)

    def step_boundary(self) -> None:
        """Mark where one step ends and the next begins."""
        self.boundaries.append(self._mark())

    def median_step_ms(self) -> float:
        """Median interval between consecutive step boundaries (ms). On a GPU the intervals are on the
        device's timeline: a device-bound step's kernel time, a host-bound step's launch rate."""
        if len(self.boundaries) < 2:
            raise ValueError("median_step_ms needs at least two step boundaries")
        if self.cuda:
            torch.cuda.synchronize()
            gaps = [a.elapsed_time(b) for a, b in zip(self.boundaries, self.boundaries[1:])]
        else:
            gaps = [1e3 * (b - a) for a, b in zip(self.boundaries, self.boundaries[1:])]
        return statistics.median(gaps)

    def per_step_host_ms(self, steps: int) -> dict[str, float]:
        """Host milliseconds per step in each phase (the CPU's issue time, whatever the device does)."""
        return {p: 1e3 * self.host_totals.get(p, 0.0) / max(steps, 1) for p in PHASES}

    def per_step_ms(self, steps: int) -> dict[str, float]:
        totals = self.flush()
        return {p: 1e3 * totals.get(p, 0.0) / max(steps, 1) for p in PHASES}


def _ends_mid_line(path: Path) -> bool:
    """Whether ``path`` exists, is not empty and its last line lacks its newline (a crash mid-write)."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, 2) == 0:
                return False
            f.seek(-1, 2)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


class MetricsLog:
    """Appends one strict-JSON object per line (NaN/inf as null) to a file (opened on first write,
    reopened after close; a last line torn by a crash is ended first), and optionally echoes it to stdout."""

    def __init__(self, path: Path | None, *, echo: TextIO | None = None) -> None:
        self.path, self.echo = path, echo
        self._file = None

    def write(self, record: dict[str, Any]) -> None:
        line = jsontext.dumps(record, default=str)
        if self.path is not None:
            if self._file is None:
                self._file = self._open()
            self._file.write(line + "\n")
            self._file.flush()
        if self.echo is not None:
            self.echo.write(line + "\n")
            self.echo.flush()

    def _open(self) -> TextIO:
        """The log file, opened to append (its directory made); OSError names the file."""
        file_above = next((parent for parent in self.path.parents if parent.is_file()), None)
        if file_above is not None:
            raise NotADirectoryError(f"metrics log {self.path} cannot be written: {file_above} is a file, "
                                     "not a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torn = _ends_mid_line(self.path)
            file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise OSError(f"metrics log {self.path} cannot be written: {exc.strerror or exc}") from exc
        if torn:  # a writer that crashed mid-line: its fragment stays, on a line of its own
            file.write("\n")
        return file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
