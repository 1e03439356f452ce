"""Where a training step's batch lies, kept on the device (stages 11 and 13).

A captured graph replays fixed addresses, so its launch cannot say where the next batch is.
Instead the step's kernels read the batch's address from a ``BatchCursor`` {x, target} in
device memory (kernels/batch_cursor.cuh) and move it past the rows they read: stage 13's
persistent_step, and stage 11's fetch_batch at the head of the lean step's graph. Consecutive
batches of one array, as ``Trainer.epoch`` hands them out, then need nothing from the host
between steps. The host keeps where the cursor points and writes it (two 8-byte addresses)
only where the next batch lies elsewhere, as at the start of an epoch.
"""

from __future__ import annotations

import numpy as np

from .array import ITEMSIZE, DeviceArray
from .runtime import copy_htod


class BatchCursor:
    """The device-side cursor (``array``) and the host's copy of where it points."""

    def __init__(self):
        self.array = DeviceArray.empty((4,))  # {x, target}: two 8-byte addresses
        self._at: tuple[int, int] | None = None  # None: unknown (never written, or a launch failed)

    def point_at(self, x: DeviceArray, y: DeviceArray) -> None:
        """Aim the cursor at the rows of (x, y), which the kernels read in place: a 16-byte write,
        only where the cursor is not there already. Call ``moved_past`` once the launch that
        reads them is queued."""
        if not (x.is_contiguous() and y.is_contiguous()):
            raise ValueError("the step reads the batch in place through a cursor: its rows must be contiguous")
        if self._at != (x.ptr, y.ptr):
            copy_htod(self.array.ptr, np.array([x.ptr, y.ptr], np.uint64).view(np.float32))
        self._at = None  # unknown until the launch is queued (a failed one leaves it so)

    def moved_past(self, x: DeviceArray, y: DeviceArray) -> None:
        """Where the kernels leave the cursor: just past the rows of (x, y)."""
        self._at = (x.ptr + ITEMSIZE * x.size, y.ptr + ITEMSIZE * y.size)

    def forget(self) -> None:
        """The cursor's place is unknown (a test moved it, say): the next point_at writes it."""
        self._at = None
