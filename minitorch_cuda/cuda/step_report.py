"""A step's loss, handed to the host by the kernel itself (stage 13, chapter 21).

The protocol reads the loss back every step. A copy does that once the whole step is done: a
cuMemcpyDtoH queued behind the kernel, and the host waiting for both. Stage 13's kernel knows
the loss halfway, after its rows phase, and writes it there into a word of pinned host memory
mapped into the device's address space (kernels/step_report.cuh): the loss's bits and a
nonzero flag in one 8-byte store. The host polls that word; it has the loss while the kernel
still computes the gradients and the update, and queues the next step meanwhile, so the next
launch's cost overlaps this step instead of following it.

``arm()`` zeroes the word before each launch that will write it; ``wait()`` returns the loss.
Zeroing is safe only when no earlier launch can still write the word: ``arm`` waits for the
device first if the last armed step was never waited for. A kernel that fails before its
report leaves the word zero: after POLLS polls the host synchronizes, which raises the
kernel's error, or finds the word still zero and says so.
"""

from __future__ import annotations

import numpy as np

from .runtime import KernelError, mapped_host, synchronize

POLLS = 20_000  # about 2 ms of polling before the host asks the driver why nothing came


class StepReport:
    """The host's word for one kernel's loss; ``ptr`` is the address the kernel writes."""

    def __init__(self):
        self.word, self.ptr = mapped_host(1, np.uint64)
        self._armed = False

    def arm(self) -> None:
        """Zero the word for the launch about to be queued."""
        if self._armed:  # the last armed step's report may still be on its way
            synchronize("a step whose loss was never read")
        self.word[0] = 0
        self._armed = True

    def wait(self) -> float:
        """The armed launch's loss, once its kernel has written it."""
        word = self.word
        for _ in range(POLLS):
            bits = int(word[0])  # one 8-byte load: the flag and the loss together
            if bits:
                break
        else:
            synchronize("a step that had not reported its loss")
            bits = int(word[0])
        self._armed = False
        if not bits:
            raise KernelError("the step's kernel finished without reporting its loss")
        return float(np.uint32(bits & 0xFFFFFFFF).view(np.float32))
