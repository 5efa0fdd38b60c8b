"""The embedding backward on a stream of its own (one GPU, synchronous steps).

polyrec's TBE applies its optimizer inside its backward, and nothing in a step reads the tables after
that until the next lookup. So on one GPU the backward can run on a second stream from the moment its
gradient is final, beside what the compute stream still has to do: with a cross network (DLRM-DCNv2,
embeddings in the compute dtype) layer 0's two weight-gradient GEMMs, the casts of the cross
weights' gradients and the bottom MLP's backward (``polyrec.kernels.dcn`` ``on_input_grad``), then
the dense optimizer; with the dot interaction, the dense optimizer. The TBE backward is bound by
memory, the weight-gradient GEMMs by arithmetic. The next step waits for the backward (``join``)
before it runs anything, so every update happens in the order of one stream and the numbers are the
same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class SideBackward:
    """A second stream for the embedding backward and the point of the compute stream it starts from."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)
        self._ready: torch.cuda.Event | None = None

    def gradient_final(self, grad: torch.Tensor) -> None:
        """``DLRM.embedding_grad_hook``: the embeddings' gradient is final at this point of the current
        stream (the dense backward's); ``grad`` itself is read later, from the step's gradient tap."""
        self._ready = torch.cuda.Event()
        self._ready.record()

    @contextmanager
    def running(self) -> Iterator[None]:
        """The side stream as the current stream, started where the gradient became final (where
        ``gradient_final`` marked it this step, else at the current stream's present end)."""
        ready, self._ready = self._ready, None
        if ready is None:
            ready = torch.cuda.Event()
            ready.record()
        self.stream.wait_event(ready)
        with torch.cuda.stream(self.stream):
            yield

    def join(self) -> None:
        """Make the current stream wait for everything issued on the side stream."""
        torch.cuda.current_stream().wait_stream(self.stream)
