"""The subject starts no program: a seccomp filter under which ``execve`` fails.

``subject_rules`` refuses the ways Python offers to start a program, by their audit events, but
not every way raises one (``_posixsubprocess.fork_exec`` raises none in CPython 3.11), and a
program started so (a second Python) runs without the hook: it could import what the exercise
rules out and hand back the answer. The kernel's filter holds whatever the spelling: from
``forbid()`` on, ``execve`` and ``execveat`` fail with EPERM in this process and in everything it
forks. Linux on x86-64 only (the system call numbers are the architecture's); elsewhere
``forbid()`` says why it could not.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
RET_EPERM = 0x00050000 | errno.EPERM
AUDIT_ARCH_X86_64 = 0xC000003E
EXECVE, EXECVEAT = 59, 322
X32_BIT = 0x40000000  # the x32 ABI's system calls: their execve is another number
LOAD_WORD, JUMP_EQUAL, JUMP_AT_LEAST, RETURN = 0x20, 0x15, 0x35, 0x06  # classic BPF opcodes

# (opcode, jump if true, jump if false, constant); a jump counts the instructions it skips
PROGRAM = (
    (LOAD_WORD, 0, 0, 4),  # seccomp_data.arch
    (JUMP_EQUAL, 1, 0, AUDIT_ARCH_X86_64),
    (RETURN, 0, 0, RET_KILL_PROCESS),  # a 32-bit system call (int 0x80): its numbers differ
    (LOAD_WORD, 0, 0, 0),  # seccomp_data.nr
    (JUMP_AT_LEAST, 2, 0, X32_BIT),
    (JUMP_EQUAL, 1, 0, EXECVE),
    (JUMP_EQUAL, 0, 1, EXECVEAT),
    (RETURN, 0, 0, RET_EPERM),
    (RETURN, 0, 0, RET_ALLOW),
)


class _Program(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def forbid() -> str | None:
    """Install the filter for the rest of this process's life (and its children's); None, or why
    it could not be installed."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return f"no filter for {sys.platform} on {platform.machine()} (x86-64 Linux only)"
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in PROGRAM)
    program = _Program(len(PROGRAM), code)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(program), 0, 0) != 0:
        return f"prctl(PR_SET_SECCOMP) failed: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    return None
