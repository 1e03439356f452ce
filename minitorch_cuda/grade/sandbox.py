"""Where student code runs: a private folder, and bubblewrap's namespaces where bwrap exists.

``command(argv, workdir, gpu=...)`` wraps a command for the sandbox. With
bubblewrap (``bwrap``, a Debian package) the process gets its own mount, PID,
network, IPC and UTS namespaces and a new session; it sees only ``workdir``
(read-write), a fresh ``/tmp``, the Python environment and the system read-only,
the GPU's device nodes when ``gpu`` is set, and nothing of the submissions or
the grader's outputs; ``--die-with-parent`` ends everything it started when the
grader's process for it ends. Without bwrap, the process runs in ``workdir``
(a private copy) in its own session, and ``sweep`` kills every process it left
behind: this process is a child subreaper (Linux), so orphans are re-parented
to it and found by process id. That isolation is partial (the student's code
can still reach the file system by absolute paths), and ``describe()`` says so.
Either way, where a pids cgroup can be made (``task_groups``), every process ``popen``
starts gets a group of its own of at most ``MAX_TASKS`` processes and threads, and
``finish`` kills what is left in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import emulator, kernel_cache

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding minitorch_cuda/: a checkout or site-packages
_lock = threading.Lock()
_ours: set[int] = set()  # processes this process started and still waits for
PR_SET_CHILD_SUBREAPER = 36


@functools.cache
def bwrap() -> str | None:
    """The bwrap binary if it exists and can create namespaces here, else None."""
    path = shutil.which("bwrap")
    if path is None or os.environ.get("MINITORCH_CUDA_NO_BWRAP") == "1":
        return None
    try:
        probe = [path, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent", "true"]
        ok = subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return path if ok else None


TMPFS_BYTES = 1 << 30  # the sandbox's /tmp and /dev/shm, each


@functools.cache
def _sized_tmpfs() -> bool:
    """Whether this bwrap takes ``--size`` for a tmpfs (bubblewrap 0.5 and later)."""
    probe = [bwrap(), "--ro-bind", "/", "/", "--size", str(1 << 20), "--tmpfs", "/tmp", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def describe() -> str:
    if bwrap():
        return "bubblewrap (own mount, PID and network namespaces; only a private copy of the folder is writable)"
    return (
        "private copy and process sweep only (bubblewrap is not available: isolation is partial, "
        "the code could still reach other files by absolute path)"
    )


def kind() -> str:
    return "bwrap" if bwrap() else "partial"


def package_first(env: dict) -> dict:
    """``env`` with this package's folder first on PYTHONPATH: a process started from it imports
    the grader's own minitorch_cuda, whatever its working folder."""
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _library_path(path: str) -> bool:
    """A sys.path entry that holds installed packages (never the working directory that ``python -m``
    puts first: that may be /tmp or the folder holding the submissions): inside the environment, a
    site-packages folder, or a folder the instructor put on PYTHONPATH (packages installed with
    ``pip --target``, as on a machine whose image lacks them)."""
    real = os.path.realpath(path)
    if real in ("/", "/tmp", os.path.realpath(os.getcwd())) or not os.path.isdir(real):
        return False
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    inside = any(real == q or real.startswith(q + "/") for q in prefixes)
    chosen = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    return inside or real in chosen or "site-packages" in real or "dist-packages" in real


def _read_only_paths() -> list[str]:
    paths = ["/usr", "/etc", "/opt", sys.prefix, sys.base_prefix, str(PACKAGE_ROOT)]
    paths += [p for p in sys.path if p and _library_path(p)]
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda:
        paths.append(cuda)
    out: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


# what a sandboxed run may write: its folder is a file system of this size (in memory, gone with it)
DISK_BYTES = int(os.environ.get("MINITORCH_CUDA_GRADE_DISK_BYTES", 1 << 30))
INPUT = "/grade-input"  # where a run with a disk of its own sees its folder's files, read-only
INPUT_ENV = "MINITORCH_CUDA_GRADE_INPUT"


def own_disk() -> bool:
    """Whether ``command(..., own_disk=True)`` gives the run a size-limited file system (bubblewrap
    with ``--size``); where not, ``wait`` watches what the run writes instead."""
    return bwrap() is not None and _sized_tmpfs()


def _bwrap_start(binary: str, *unshare: str) -> list[str]:
    """bwrap's first arguments for any sandboxed run: ended with the grader, a session of its own."""
    args = [binary, "--die-with-parent", "--new-session", *unshare]
    if os.geteuid() == 0:  # bwrap run by root keeps every capability: the code could remount /usr rw
        args += ["--cap-drop", "ALL"]
    return args


def _top_level_system(folders: tuple[str, ...]) -> list[str]:
    """The system's top-level folders as they are here: a link (to usr/bin, on merged-/usr systems) as a
    link, a folder bound read-only."""
    args: list[str] = []
    for folder in folders:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    return args


def _course_content() -> list[Path]:
    """What of a checkout the sandbox must not show: installed editable (or put on PYTHONPATH), the
    package sits in the course's repository, whose ``solutions/``, ``exercises/``, ``tests/`` and
    ``chapters/`` hold every exercise's answer. Every entry beside the package and the data it
    trains on is hidden, except one holding a path the sandbox needs (a virtual environment kept in
    the checkout)."""
    if not (PACKAGE_ROOT / "pyproject.toml").is_file():  # installed: its neighbours are other packages
        return []
    # what the sandbox binds, before _read_only_paths folds a venv in the checkout into the checkout
    needed = [Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    needed += [Path(os.path.realpath(p)) for p in sys.path if p and _library_path(p)]
    needed = [n for n in needed if n != PACKAGE_ROOT]
    return [
        entry
        for entry in sorted(PACKAGE_ROOT.iterdir())
        if entry.name not in ("minitorch_cuda", "data") and not any(n == entry or entry in n.parents for n in needed)
    ]


def _covered(entry: Path) -> list[str]:
    """bwrap's arguments that leave nothing of ``entry`` to read: a folder empty, a file (or a link)
    an empty file."""
    if entry.is_symlink() or not entry.is_dir():
        return ["--ro-bind", "/dev/null", str(entry)]
    return ["--tmpfs", str(entry)]


def command(
    argv: list[str],
    workdir: Path,
    *,
    gpu: bool = False,
    hide: list[Path] = (),
    own_disk: bool = False,
    cover: list[Path] = (),
) -> list[str]:
    """``argv`` wrapped in bwrap (when usable); ``workdir`` is the only writable folder; ``hide``
    (the submissions, the outputs) is covered by an empty tmpfs should a read-only path hold it, and
    so is each folder of ``cover`` (each file of it reads as empty: an answer key, in a subject).
    ``own_disk`` (where ``own_disk()``): ``workdir`` is a file system of ``DISK_BYTES`` in memory,
    gone with the run (a cell's ``fallocate`` of gigabytes fails at once, it fills nothing else);
    the folder's files are bound read-only at ``INPUT`` and ``unpack_input`` copies them in before
    anything of the student's runs, and results leave through a pipe (``runner``)."""
    binary = bwrap()
    if binary is None:
        return list(argv)
    workdir = Path(workdir).resolve()
    args = _bwrap_start(binary, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts")
    args += _top_level_system(("/bin", "/lib", "/lib64", "/sbin"))
    # an empty /tmp first: a read-only path below it (a virtual environment in /tmp) is bound on top;
    # it and /dev/shm live in memory, which no limit of a process counts: each gets a size
    sized = ["--size", str(TMPFS_BYTES)] if _sized_tmpfs() else []
    args += ["--proc", "/proc", "--dev", "/dev", *sized, "--tmpfs", "/tmp", *sized, "--tmpfs", "/dev/shm"]
    ro = _read_only_paths()
    for path in ro:
        args += ["--ro-bind", path, path]
    if gpu:
        for node in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
            args += ["--dev-bind", node, node]
        if os.path.isdir("/sys"):
            args += ["--ro-bind", "/sys", "/sys"]
    for entry in _course_content():
        args += _covered(entry)
    for path in map(Path, cover):
        if path.exists() and not path.is_symlink():
            args += _covered(path)
    for path in hide:
        path = Path(path).resolve()
        if any(str(path).startswith(q.rstrip("/") + "/") or str(path) == q for q in ro) and path.is_dir():
            if not str(workdir).startswith(str(path) + "/"):
                args += ["--tmpfs", str(path)]
    args += ["--remount-ro", "/dev"]  # its device nodes stay usable; no file can be written there
    if own_disk and _sized_tmpfs():
        args += ["--ro-bind", str(workdir), INPUT, "--size", str(DISK_BYTES), "--tmpfs", str(workdir)]
        args += ["--setenv", INPUT_ENV, INPUT, "--chdir", str(workdir)]
    else:
        args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    return args + ["--", *argv]


def unpack_input() -> None:
    """In a run with a disk of its own (``command(..., own_disk=True)``): copy the folder's files from
    ``INPUT`` into the working folder. Called by the sandboxed worker before any student code runs."""
    source = os.environ.pop(INPUT_ENV, None)
    if source and os.path.isdir(source):
        copy_tree(Path(source), Path.cwd(), limit=DISK_BYTES)


# what sandboxed code sees of the grader's environment (nothing else: no tokens, no credentials,
# nothing a student's error message could carry back into the feedback)
_PASSED_ON = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV"}
_PASSED_ON |= {"OMP_NUM_THREADS", "CONDA_PREFIX", "SSL_CERT_FILE", "SSL_CERT_DIR"}
_PASSED_ON_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "MINITORCH_CUDA_", "OPENBLAS_", "MKL_")


def environment(workdir: Path, gpu: str | None = None, *, no_gpu: bool = False) -> dict:
    """The environment of sandboxed code: HOME and the caches in its folder; only its own GPU
    (``gpu``), or none at all (``no_gpu``)."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON or k.startswith(_PASSED_ON_PREFIXES)}
    home = str(Path(workdir).resolve())
    env.update(HOME=home, JUPYTER_RUNTIME_DIR=f"{home}/.jupyter", IPYTHONDIR=f"{home}/.ipython")
    # temporary files on the same file system as the caches (a compiler's os.replace into them works)
    Path(home, ".tmp").mkdir(exist_ok=True)
    env.update(MPLCONFIGDIR=f"{home}/.matplotlib", XDG_CACHE_HOME=f"{home}/.cache", TMPDIR=f"{home}/.tmp")
    env[kernel_cache.ENV] = str(kernel_cache.under(home))  # its own: nothing it compiles reaches others
    package_first(env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if no_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def gpu_reachable(gpu: str | None) -> str | None:
    """None if CUDA starts inside the sandbox (notebooks' GPU cells need it), else why not."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="grade-probe-") as tmp:
        probe = [sys.executable, "-c", "import minitorch_cuda as mt; print(mt.cuda_unavailable_reason() or 'ok')"]
        try:
            out = subprocess.run(
                command(probe, Path(tmp), gpu=True),
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp,
                env=environment(Path(tmp), gpu=gpu),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
    lines = (out.stdout + out.stderr).strip().splitlines()
    return None if lines and lines[-1] == "ok" else (lines[-1] if lines else f"exit code {out.returncode}")


def seed_emulator_cache(workdir: Path) -> None:
    """Copy the grader's own emulator cache (the emulator's runtime and the kernels trusted processes
    built, a few hundred KB) into a sandbox's private cache, so that it need not rebuild them; what
    the sandbox compiles stays in its copy."""
    outer = kernel_cache.emulator_builds(kernel_cache.folder())
    if outer.is_dir():
        shutil.copytree(outer, kernel_cache.emulator_builds(kernel_cache.under(workdir)), dirs_exist_ok=True)


def build_emulator_runtime() -> None:
    """Build the emulator's runtime and device process once in the grader's cache (trusted code), for
    the sandboxes to copy."""
    code = "from minitorch_cuda.emulator import device_process as d, toolchain as t; t.runtime_library(); d.binary()"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="") | emulator.switched_on()
    package_first(env)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)


# --- the processes we start and the ones they leave behind --------------------------------


def become_subreaper() -> bool:
    """Make orphans of our descendants our children (Linux), so that ``sweep`` can find them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


MAX_TASKS = 1024  # processes and threads of one run at once (a notebook's kernel has a few dozen)
_groups: dict[int, Path] = {}  # our process -> the task group it was started in


@functools.cache
def task_groups() -> Path | None:
    """The pids cgroup of this process where it may make groups below it (cgroup v1's pids
    controller, or v2 with pids enabled for its children), or None: there a fork bomb is bounded
    only by the run's timeout (RLIMIT_NPROC does not hold for root)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            here = Path("/sys/fs/cgroup/pids", path.lstrip("/"))
        elif controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            here = Path("/sys/fs/cgroup", path.lstrip("/"))
        else:
            continue
        probe = here / f"minitorch-grade-probe-{os.getpid()}"
        try:
            probe.mkdir()
            try:
                (probe / "pids.max").write_text("1")
                return here
            finally:
                probe.rmdir()
        except OSError:
            continue
    return None


def _in_task_group(argv: list[str]) -> tuple[list[str], Path | None]:
    """``argv`` started in a new task group of at most ``MAX_TASKS`` (a shell writes its own process
    id into it, then becomes the command: a fork bomb then fails to fork instead of taking the
    machine), and that group; unchanged where there are no task groups."""
    root = task_groups()
    if root is None:
        return argv, None
    group = root / f"minitorch-grade-{os.getpid()}-{len(_groups)}-{time.monotonic_ns()}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(MAX_TASKS))
    except OSError:
        return argv, None
    joined = f'echo $$ > {shlex.quote(str(group / "cgroup.procs"))} 2>/dev/null; exec "$@"'
    return ["/bin/sh", "-c", joined, "sh", *argv], group


def _end_task_group(group: Path) -> None:
    """Kill whatever is left in ``group`` and in the groups below it (a checker's subject has its
    own; nothing inside can leave them, it sees no cgroup file system), then remove them."""
    for _ in range(50):
        for folder, _, _ in os.walk(group, topdown=False):  # the innermost groups first
            with contextlib.suppress(OSError, ValueError):
                for pid in map(int, Path(folder, "cgroup.procs").read_text().split()):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        if not group.exists():
            return
        time.sleep(0.02)  # killed tasks leave their group a moment later


def popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session and a task group of its own, remembered as ours until
    ``finish``."""
    argv, group = _in_task_group(list(argv))
    with _lock:
        proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
        _ours.add(proc.pid)
        if group is not None:
            _groups[proc.pid] = group
    return proc


def finish(proc: subprocess.Popen) -> None:
    """Kill the process's whole session (it made one) and its task group, reap it, then sweep what
    it left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with _lock:
        group = _groups.pop(proc.pid, None)
    if group is not None:
        _end_task_group(group)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    with _lock:
        _ours.discard(proc.pid)
    sweep()


def _children() -> list[int]:
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(entry))
    return out


def sweep() -> list[int]:
    """Kill (and reap) every child of this process that it did not start itself: orphans of the
    student's code, re-parented here. Returns their process ids."""
    if not sys.platform.startswith("linux"):
        return []
    killed = []
    with _lock:
        for pid in _children():
            if pid in _ours:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        deadline = time.monotonic() + 2  # reap them; one stuck in the kernel is left to a later sweep
        for pid in killed:
            with contextlib.suppress(ChildProcessError, OSError):
                while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                    time.sleep(0.01)
    return killed


def limit_resources(*, memory_bytes: int | None = None, file_bytes: int = 256 << 20) -> None:
    """Cap what this process (and what it starts) may write to one file and, without a GPU to map,
    its address space: a print loop or a memory bomb then ends the student's process, not the
    grading machine. Called by the sandboxed process itself, before any student code runs."""
    import resource

    limits = [(resource.RLIMIT_FSIZE, file_bytes)]
    if memory_bytes is not None:
        limits.append((resource.RLIMIT_AS, memory_bytes))
    for which, value in limits:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (value, value))


MAX_WRITTEN = 2 << 30  # bytes a sandboxed run may leave in its folder: past it the run is stopped
MAX_ENTRIES = 100_000  # files and folders of a run's folder: past it the run is stopped too


def written(folder: Path) -> tuple[int, int]:
    """(bytes allocated, entries) under ``folder``, counting each file once and following no link;
    stops counting past ``MAX_ENTRIES``."""
    total, entries, seen, stack = 0, 0, set(), [str(folder)]
    while stack and entries <= MAX_ENTRIES:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as scan:
            for entry in scan:
                entries += 1
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif info.st_ino not in seen:
                        seen.add(info.st_ino)
                        total += info.st_blocks * 512
    return total, entries


def wait(proc: subprocess.Popen, timeout: float, folder: Path | None) -> tuple[int | None, str | None]:
    """Wait for ``proc`` up to ``timeout`` s while watching what it writes to ``folder`` (None: a run
    with a disk of its own, nothing to watch): (its return code or None, why it was stopped early or
    None). A run that fills the disk would make every other student's checks fail, which a per-file
    limit alone does not prevent (many files); polling is the fallback where bwrap has no ``--size``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            step = deadline - time.monotonic() if folder is None else min(1.0, deadline - time.monotonic())
            return proc.wait(timeout=max(0.01, step)), None
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None, None
        nbytes, entries = written(folder)
        if nbytes > MAX_WRITTEN or entries > MAX_ENTRIES:
            return None, f"it wrote more than {MAX_WRITTEN >> 20} MB or {MAX_ENTRIES} files to disk"


COMPILER_MEMORY = 8 << 30  # address space of nvcc and what it starts (cicc, ptxas, the host compiler)


def limited_compilers(folder: Path, memory_bytes: int = COMPILER_MEMORY) -> str | None:
    """A folder to put first on PATH, in which ``nvcc`` runs the real one with its address space and
    its children's capped: on a GPU the checker compiles a student's source itself, where a CUDA
    context rules out a cap on the checker, and a preprocessor bomb (a macro doubled forty times)
    would take the machine's memory. None where there is no nvcc."""
    real = shutil.which("nvcc")
    if real is None:
        return None
    tools = Path(folder, "bin")
    tools.mkdir(exist_ok=True)
    wrapper = tools / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nulimit -v {memory_bytes >> 10}\nexec {shlex.quote(real)} "$@"\n')
    wrapper.chmod(0o755)
    return str(tools)


MAX_COPIED = 256 << 20  # bytes of a student's folder copied for a notebook's run: one copy per notebook
MAX_DEPTH = 32  # folders below a copied folder: deeper ones are left out (no notebook needs more)


def copy_tree(folder: Path, dest: Path, limit: int | None = None) -> list[str]:
    """Copy the regular files and folders under ``folder`` into ``dest`` (no link followed, no fifo,
    socket or device opened; iteratively, so no depth costs the grader its stack) and return what was
    left out, as text: what cannot be read, what lies deeper than ``MAX_DEPTH``, what would take the
    copy past ``limit`` bytes (a folder of huge files must not fill the grading machine's disk)."""
    limit = MAX_COPIED if limit is None else limit
    dest.mkdir(parents=True, exist_ok=True)
    copied, left_out = 0, []
    stack = [(str(folder), str(dest), 0)]  # names as os.fsdecode keeps them: any bytes go through
    while stack:
        src, dst, depth = stack.pop()
        try:
            with os.scandir(src) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            left_out.append(os.path.relpath(src, folder))
            continue
        for entry in entries:
            name = os.path.relpath(entry.path, folder)
            target = os.path.join(dst, entry.name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 > MAX_DEPTH:
                        left_out.append(name)
                        continue
                    os.mkdir(target)
                    stack.append((entry.path, target, depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    if copied + size > limit:
                        left_out.append(name)
                        continue
                    shutil.copy(entry.path, target)  # with its mode: the emulator's cache holds programs
                    copied += size
            except OSError:  # unreadable (its mode), gone, or a name too long: the run goes on without it
                left_out.append(name)
    return left_out


def private_copy(folder: Path, dest: Path) -> tuple[Path, list[str]]:
    """A copy of a student's folder (``copy_tree``) and the files left out."""
    return dest, copy_tree(Path(folder), Path(dest))


def remove_tree(folder: Path) -> None:
    """Remove ``folder`` and everything under it, iteratively (a run may leave folders nested deeper
    than ``shutil.rmtree``'s recursion reaches), following no link; what cannot be removed stays."""
    stack, folders = [str(folder)], []
    while stack:
        current = stack.pop()
        folders.append(current)
        with contextlib.suppress(OSError), os.scandir(current) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
    for path in reversed(folders):  # the deepest first
        with contextlib.suppress(OSError):
            os.rmdir(path)


@contextlib.contextmanager
def scratch(prefix: str):
    """A temporary folder, removed with ``remove_tree`` (``tempfile.TemporaryDirectory`` recurses)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        remove_tree(path)


# --- a compiler run on a student's source ---------------------------------------------------------

COMPILE_TIMEOUT = 120  # seconds of one compiler run on a student's source


def real_nvcc() -> str | None:
    """The nvcc a compile runs: the one on PATH, or the toolkit's that a wrapper script there runs
    (``limited_compilers``', or a /usr/local/bin/nvcc that execs /usr/local/cuda/bin/nvcc)."""
    found = shutil.which("nvcc")
    for _ in range(4):  # a wrapper of a wrapper
        try:
            head = Path(found).read_bytes()[:4096] if found else b""
        except OSError:
            break
        runs = re.search(rb"(/[\w./+-]+/bin/nvcc)\b", head) if head.startswith(b"#!") else None
        if runs is None or not os.path.isfile(runs.group(1).decode()):
            break
        found = runs.group(1).decode()
    return found


def real_cxx() -> str | None:
    """The C++ compiler the emulator builds with (``$CXX``, else g++), its links resolved: a GPU
    machine's may be a toolchain of its own (/opt/gcc) that no default bind shows."""
    from ..emulator.toolchain import CXX

    found = shutil.which(CXX)
    return os.path.realpath(found) if found else None


def _compiler_dirs() -> list[str]:
    """What a compiler needs to see: the system (``/usr``: g++, and nvcc under /usr/local) and the CUDA
    toolkit where it lies elsewhere; no /etc, /home, /work or /proc of the grader."""
    dirs = ["/usr"]
    nvcc, cxx = real_nvcc(), real_cxx()
    toolchains = (nvcc and str(Path(nvcc).parents[1]), cxx and str(Path(cxx).parents[1]))
    for extra in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *toolchains):
        if extra and os.path.isdir(extra):
            dirs.append(os.path.realpath(extra))
    out: list[str] = []
    for d in sorted(set(dirs)):
        if not any(d == q or d.startswith(q + "/") for q in out):
            out.append(d)
    return out


def compile_command(argv: list[str], workdir: Path, readable: list[Path] = ()) -> list[str]:
    """``argv`` (a compiler on a student's source) wrapped in bwrap: it sees the system's compilers,
    ``readable`` (the course's headers) read-only and ``workdir`` (the source and what it builds)
    read-write, and nothing else: no other student, no checkout, no grader's /proc. Without bwrap
    the command is returned as it is (``describe`` says the isolation is partial)."""
    binary = bwrap()
    if binary is None:
        return list(argv)
    args = _bwrap_start(binary, "--unshare-all")
    args += _top_level_system(("/bin", "/lib", "/lib64", "/lib32", "/sbin"))
    for path in _compiler_dirs():
        args += ["--ro-bind", path, path]
    package = str(PACKAGE_ROOT)
    if any(package.startswith(d + "/") for d in _compiler_dirs()):  # an install under /usr: not its kernels
        args += ["--tmpfs", package]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in readable:
        path = str(Path(path).resolve())
        args += ["--ro-bind", path, path]
    workdir = Path(workdir).resolve()
    args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    return args + ["--", *argv]


def compile_environment(workdir: Path) -> dict:
    """A compiler's whole environment: a PATH to the compilers and a home in ``workdir``; nothing
    of the grader's (its /proc/self/environ, read by a kernel's ``#include``, shows only this)."""
    # the compilers' real folders: /usr/local/cuda may lead there through /etc/alternatives, not bound here
    paths = [os.path.dirname(os.path.realpath(p)) for p in (real_nvcc(), real_cxx(), shutil.which("g++")) if p]
    path = os.pathsep.join(dict.fromkeys([*paths, "/usr/local/bin", "/usr/bin", "/bin"]))
    home = str(Path(workdir).resolve())
    return {"PATH": path, "HOME": home, "TMPDIR": home, "LC_ALL": "C"}


def run_compiler(argv: list[str], workdir: Path, readable: list[Path] = ()) -> subprocess.CompletedProcess:
    """Run a compiler on a student's source in the sandbox (``compile_command``), its address space
    capped (a preprocessor bomb) and its time limited; output as text."""
    compiler_memory = COMPILER_MEMORY

    def cap() -> None:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)  # a cap this process has already (the checker's) stays
        cap_bytes = compiler_memory if hard == resource.RLIM_INFINITY else min(compiler_memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    try:
        return subprocess.run(
            compile_command(argv, workdir, readable),
            cwd=workdir,
            env=compile_environment(workdir),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=COMPILE_TIMEOUT,
            preexec_fn=cap,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"compile time limit: more than {COMPILE_TIMEOUT} s")
