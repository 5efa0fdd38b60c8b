"""Compute-dtype copies of fp32 master weights, kept up to date by the optimizer that writes the masters.

Under bf16 compute each forward copies every fp32 master weight and bias to bf16 before its GEMM
(``compute_copy``): on MLPerf DLRM-DCNv2 25 cast kernels and their launches per step. ``FusedAdagrad``
reads and writes every master once per step anyway, so it writes the master's bf16 copy in the same pass
(two more bytes per value) and ``compute_copy`` hands that copy out instead of casting, while it is
current.

Current means: the master's version counter and storage are the ones recorded when the copy was last
made equal to it. Torch's in-place ops bump the version, so a master changed by anything else (a
checkpoint load, torch's optimizers, user code) is cast afresh. Triton kernels do not bump it: the one
kernel that writes dense masters, ``polyrec.kernels.dense_optim.adagrad_kernel``, writes their copies in
the same pass and re-records them (``mark_current``) or drops them (``drop``). Not seen: an in-place
write through ``p.data`` (``p.data.add_(...)``: a tensor with a version counter of its own), which no
polyrec code makes; a storage swapped in (``p.data = ...``) is seen by its address.

Copies are kept only for leaf tensors that require a gradient (parameters), on the parameter object
itself, so they live and die with it. While a CUDA graph is being captured none is kept or handed out
(and any kept one is dropped): a replay reads the addresses of its capture and would not see a later
cast afresh. Unless the capture runs under ``keeping_in_capture`` (the trainer's, when its optimizer
writes the copies): then a current copy is handed out and recorded, and ``CapturedCopies.refresh``,
before each replay, casts into the same tensor any copy whose master something else has written since.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

#: The attribute of a master parameter that holds its :class:`KeptCopy`.
ATTR = "_polyrec_compute_copy"


@dataclass(slots=True)
class KeptCopy:
    """A master's copy in the compute dtype and the master's state when the two were last equal."""

    tensor: torch.Tensor  # the master's values in the compute dtype, same shape
    version: int  # master._version then
    data_ptr: int  # master.data_ptr() then


@dataclass(slots=True)
class CapturedCopies:
    """The kept copies a CUDA graph's capture handed out (``keeping_in_capture``): (master, its copy, the
    master's address then) each; the graph reads the copy at its address on every replay."""

    entries: list[tuple[torch.Tensor, torch.Tensor, int]] = field(default_factory=list)

    def add(self, master: torch.Tensor, copy: torch.Tensor) -> None:
        if not any(c is copy for _, c, _ in self.entries):
            self.entries.append((master, copy, master.data_ptr()))

    def refresh(self) -> None:
        """Before a replay: cast into its own tensor each copy that is not current (its master written by
        something other than the optimizer that keeps the copies, or the copy dropped), and keep it again."""
        for master, copy, address in self.entries:
            if master.data_ptr() != address:
                raise RuntimeError(f"a master weight {tuple(master.shape)} got new storage after the CUDA graph "
                                   "that reads it was captured; the graph would read the old one")
            held: KeptCopy | None = getattr(master, ATTR, None)
            if held is not None and held.tensor is copy and _current(master, held):
                continue
            with torch.no_grad():
                copy.copy_(master)
            setattr(master, ATTR, KeptCopy(tensor=copy, version=master._version, data_ptr=address))


_KEEPING: ContextVar[CapturedCopies | None] = ContextVar("polyrec_keeping_in_capture", default=None)


@contextmanager
def keeping_in_capture() -> Iterator[CapturedCopies]:
    """Inside, a CUDA graph's capture takes each master's kept copy where it is current (no cast in the graph)
    and records it in the object yielded, whose ``refresh`` must run before every replay."""
    kept = CapturedCopies()
    token = _KEEPING.set(kept)
    try:
        yield kept
    finally:
        _KEEPING.reset(token)


def _current(t: torch.Tensor, held: KeptCopy) -> bool:
    return held.version == t._version and held.data_ptr == t.data_ptr()


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def cast(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``t`` in ``dtype``, cast afresh at every call (differentiable); None and ``dtype`` tensors as they are."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


def compute_copy(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``t`` in ``dtype`` (a master weight's copy for the forward, made inside an autograd Function: its
    gradient is the Function's to return in the master's dtype): the kept copy where it is current, else a
    new cast, kept for the optimizer to update where ``t`` is a parameter."""
    if t is None or t.dtype == dtype:
        return t
    held: KeptCopy | None = getattr(t, ATTR, None)
    current = held is not None and held.tensor.dtype == dtype and _current(t, held)
    if _capturing(t):
        kept = _KEEPING.get()
        if kept is not None and current:
            kept.add(t, held.tensor)
            return held.tensor
        drop(t)
        return cast(t, dtype)
    if current:
        return held.tensor
    copy = cast(t, dtype)
    if t.is_leaf and t.requires_grad:
        setattr(t, ATTR, KeptCopy(tensor=copy, version=t._version, data_ptr=t.data_ptr()))
    return copy


def kept_copy(t: torch.Tensor) -> torch.Tensor | None:
    """The copy ``t`` holds (current or not), for the optimizer to overwrite with the updated values; None,
    and the copy dropped, where its shape is no longer the master's (a storage of another size swapped in:
    writing ``t``'s values into it would overrun it)."""
    held: KeptCopy | None = getattr(t, ATTR, None)
    if held is not None and held.tensor.shape != t.shape:
        drop(t)
        return None
    return None if held is None else held.tensor


def mark_current(t: torch.Tensor) -> None:
    """Record that ``t``'s kept copy now equals ``t`` (its writer does not bump the version)."""
    held: KeptCopy = getattr(t, ATTR)
    held.version, held.data_ptr = t._version, t.data_ptr()


def drop(t: torch.Tensor) -> None:
    """Forget ``t``'s kept copy, if any."""
    if hasattr(t, ATTR):
        delattr(t, ATTR)
