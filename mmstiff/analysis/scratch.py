"""A reusable buffer for the full-size temporaries of the per-step reductions.

A recorder reduces every step of a recorded pass while the network runs; a reduction that needs
a temporary the size of a state (the NSI's difference ``x_{t+1} - x_t``) would otherwise get a
fresh allocation per step. On the CPU a large allocation is mapped anew and faulted in page by
page each time; one buffer reused from step to step is faulted in once and stays in the cache
between the write and the read that follows.
"""
from typing import Tuple

import torch


class ScratchBuffer:
    """One float32 buffer, handed out as views of the requested shapes.

    The buffer grows to the largest request, and is made anew at a request less than half its
    size: a network whose states shrink stage by stage keeps a buffer the size of the current
    stage's state, not of the largest one, so the memory it holds while the pass goes on stays
    within twice the temporary it replaces. A view is valid until the next :meth:`take`.
    """

    def __init__(self):
        self._flat = None
        self._last = None  # (shape, device, view) of the last request

    def take(self, shape: Tuple[int, ...], device: torch.device) -> torch.Tensor:
        """A float32 view of ``shape`` on ``device``; its values are undefined. A request like
        the last one gets the same view (the blocks of a stage ask for one shape in turn)."""
        last = self._last
        if last is not None and last[0] == shape and last[1] == device:
            return last[2]
        numel = 1
        for size in shape:
            numel *= size
        flat = self._flat
        if (flat is None or flat.device != device or flat.numel() < numel
                or flat.numel() > 2 * numel):
            self._flat = flat = self._last = None  # the old buffer freed before the new one
            self._flat = flat = torch.empty(numel, dtype=torch.float32, device=device)
        view = flat[:numel].view(shape)
        self._last = shape, device, view
        return view

    def release(self) -> None:
        """Free the buffer (the next :meth:`take` makes a new one)."""
        self._flat = self._last = None

    @property
    def nbytes(self) -> int:
        """Bytes held (0 when released)."""
        return 0 if self._flat is None else self._flat.numel() * self._flat.element_size()
