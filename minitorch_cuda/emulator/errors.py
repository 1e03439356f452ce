"""The emulated driver's exceptions, named and nested as PyCUDA's are."""

from __future__ import annotations


class Error(Exception):
    """Any failure of the emulated driver (``pycuda.driver.Error``)."""


class LogicError(Error):
    """A request the driver refuses: a missing kernel, a bad argument."""


class LaunchError(Error):
    """A kernel failed while it ran: the message names the kernel, block and thread."""


class LaunchTimeout(LaunchError):
    """A launch ran past the time limit it was given (``driver.time_limit``) and was stopped."""


class MemoryError(Error):  # noqa: A001  (PyCUDA's name)
    """An allocation the host could not satisfy."""


class CompileError(Error):
    """The kernel source was refused: by g++, or as a construct the emulator does not model."""

    def __init__(self, msg: str, command_line: str = "", stdout: str = "", stderr: str = ""):
        super().__init__(msg)
        self.command_line, self.stdout, self.stderr = command_line, stdout, stderr
