"""What a student's Python may not reach in the subject process, refused as it happens.

``install(exercise_id)`` adds an audit hook (which no code can remove) just before the
exercise cell runs. From then on the interpreter itself reports every import, file
opened and program started, whatever the spelling that led there (``import``,
``__import__``, ``importlib.import_module("nu" + "mpy")``, ``getattr(__builtins__, ...)``,
``exec(open(path).read())``), and the hook refuses:

- the exercise's forbidden modules (``ml_dtypes`` for 2.1's rounding, ...);
- the course's answer keys: the grader's checks and reference models, the framework's
  reference code (``numerics``, ``experiments``, ``book``, ``tile_eval``, the ``.cu``
  kernels), and ``solutions/``, ``exercises/``, ``tests/``, ``chapters/`` of a checkout,
  whether imported or opened as files;
- any other framework module the subject did not load before the cell, when the student's
  code asks for it (the framework's own memory pool is 4.1's answer, its graphed step
  18.1's): the framework may still load what it needs;
- starting programs (a child process would run without this hook) and signalling others;
- ``ctypes`` and ``gc``'s object lists (ways around the interpreter's own checks); in 20.2 an
  installed package's own ctypes use passes (Triton opening the CUDA driver to see whether there
  is a GPU), of libraries the system holds (no file the student's code could have written).

The modules the subject loaded before the cell (numpy, the framework's core) stay
usable. A refusal raises ``PermissionError`` in the student's code, naming the rule, and
is kept in ``refusals``: a cell that stops on one fails with the reason ``forbidden``, and so does a
check whose call tried one, even where the student's code caught the exception (the
checker asks for them after its check). The texts here are what the student reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "minitorch_cuda"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
CHECKOUT = PACKAGE_DIR.parent  # the repository, for an editable install (else site-packages)
CHECKOUT_KEYS = ("solutions", "exercises", "tests", "chapters", "book")  # folders of a checkout

# the grader's modules the subject itself runs on; every other one is a check or an answer key
SUBJECT_MODULES = {"", "channel", "subject", "subject_rules", "fakes", "exercises", "notebook", "sandbox", "verdict"}
SUBJECT_RUNS_ON = {"no_exec", "python_work"}  # loaded by the subject too, but no student's to import
ANSWER_KEYS = {  # the framework's modules (relative to the package) that hold an exercise's answer
    "numerics": "minitorch_cuda.numerics holds the rounding this exercise asks for",
    "experiments": "the course's experiments hold the chapters' reference code",
    "book": "the book's diagrams and tables are drawn from the answer",
    "tile_eval": "chapter 20's evaluation code holds the tile kernels' answers",
    "torch_reference": "the PyTorch reference holds the framework's answers",
    "kernels": "the framework's kernels are the answers of the kernel exercises",
}
WHY_GRADER = "the grader's own code holds the checks and their answer keys"
WHY_FRAMEWORK = (
    "the framework's modules beyond those the notebook gives you (np, mt) hold answers "
    "(its memory pool, its graphed step, its launchers): write the exercise yourself"
)
WHY_CHECKOUT = "solutions/, exercises/, tests/ and the chapters hold the answers"
_NO_DL = "numpy only: no deep-learning library does the work for you"
_NO_TYPE = "round with bit operations on numpy arrays, not with a library's float type"
FORBIDDEN = {  # exercise id -> {module: why}, on top of the answer keys
    exercise_id: {"ml_dtypes": _NO_TYPE, "torch": _NO_DL, "jax": _NO_DL, "tensorflow": _NO_DL}
    for exercise_id in ("2.1", "19.1")
}
# framework modules a cell may import beyond those loaded: what the notebooks' setup cells import
# (a cell that repeats such an import is honest) and what an exercise needs (20.2's launcher wraps
# numpy arrays for Triton)
SETUP_MODULES = {"results", "exercise", "profiler"}
ALLOWED = {"20.2": {"tile_eval", "tile_eval.interop", "tile_eval.cases", "tile_eval.triton_launch"}}

WHY_PROCESS = "your code may not start programs or signal processes: the grader runs only your Python"
WHY_INTERNALS = "your code may not use ctypes or gc's object lists: they reach around the interpreter"
WHY_FOLDER = "your code may not open a folder as a file: open the files you need by their paths"
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.kill"}
PROCESS_EVENTS |= {"os.killpg", "signal.pthread_kill", "os.startfile", "pty.spawn", "os.fork", "os.forkpty"}
# (a thread would run outside python_work's line count, set for this thread before the cell)
INTERNALS_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile"}
INTERNALS_EVENTS |= {"_thread.start_new_thread"}

# where Python per element is ruled out (python_work): no way to make code pass for a library's
# or to reach the line counter (frames lead to it; code.replace and marshal make code objects)
WHY_COUNTER = (
    "your code may not reach frames or make code objects here: they lead to the grader's own code "
    "(the count of your Python lines, the launch of your kernel)"
)
COUNTER_EVENTS = {"sys._getframe", "sys._current_frames", "code.__new__", "marshal.loads", "marshal.load"}
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals"}

# where the grader launches a kernel of the cell itself (exercises.Exercise.launched): frames would
# lead the student's code to the subject's channel, which hands the grader's launcher over. Asked
# for by the student's code itself, past the standard library (typing's TypeVar reads its caller's
# frame as Triton imports a module during a launch)
FRAMES_GUARDED = {"20.2"}

refusals: list[str] = []  # what was refused, in order: the checker asks for them after its check
# file names the student's code compiled after install (``compile(source, "numpy/x.py")``): its own
# code, whatever the name says (python_work counts their lines too)
student_files: set[str] = set()


class Refused(PermissionError):
    """What the student's code tried that the exercise rules out."""


def _package_rule(relative: str, exercise_id: str) -> str | None:
    """Why module ``minitorch_cuda.<relative>`` is out of reach, or None."""
    if relative in ALLOWED.get(exercise_id, set()):
        return None
    parts = relative.split(".") if relative else []
    if parts[:1] == ["grade"]:
        return None if ".".join(parts[1:2]) in SUBJECT_MODULES else WHY_GRADER
    return ANSWER_KEYS.get(parts[0]) if parts else None


def module_rule(name: str, exercise_id: str) -> str | None:
    """Why importing ``name`` is refused in exercise ``exercise_id``, or None."""
    top = name.split(".", 1)[0]
    if top == PACKAGE:
        return _package_rule(name[len(PACKAGE) + 1 :], exercise_id)
    if top in CHECKOUT_KEYS or top == "conftest":
        return WHY_CHECKOUT
    return FORBIDDEN.get(exercise_id, {}).get(top)


def forbidden_files(exercise_id: str) -> dict[Path, str]:
    """The folders (or files) of the exercise's forbidden libraries, found without importing them:
    ``importlib.import_module`` raises no audit event for the module it is asked for, but loading
    it opens these files."""
    import importlib.util

    out = {}
    for name, why in FORBIDDEN.get(exercise_id, {}).items():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        for place in spec.submodule_search_locations or ([spec.origin] if spec.origin else []):
            out[Path(os.path.realpath(place))] = why
    return out


def _caches(folder: Path) -> list[Path]:
    """Where Python keeps the compiled modules of ``folder``: its ``__pycache__``, or under ``sys.pycache_prefix``."""
    prefix = [Path(sys.pycache_prefix, *folder.parts[1:])] if sys.pycache_prefix else []
    return [folder / "__pycache__", *prefix]


def _package_module(package: str, path: Path) -> str:
    """``package.stem`` for a file of the package's folder (``package`` for its ``__init__``)."""
    stem = path.name.split(".", 1)[0]
    return package if stem == "__init__" else f"{package}.{stem}"


def unseen(exercise_id: str) -> list[Path]:
    """What the subject's sandbox covers for ``exercise_id`` (``sandbox.command``'s ``cover``), so that
    no spelling reaches it even where the hook is got around: the answer keys' files (the modules of
    ``ANSWER_KEYS`` but those the exercise may use, the grader's modules the subject does not run on,
    their compiled copies) and the folders of the exercise's forbidden libraries. The kernels stay:
    the framework reads them as it loads, and no Python exercise's answer is a kernel."""
    exercise_id = str(exercise_id)
    allowed = ALLOWED.get(exercise_id, set())
    partly = {name.split(".", 1)[0] for name in allowed}  # a key of which the exercise may use some modules
    stems = [name for name in ANSWER_KEYS if name not in partly and name != "kernels"]
    out = [PACKAGE_DIR / name for name in stems if (PACKAGE_DIR / name).is_dir()]
    for name in sorted(partly):  # its other modules and files
        folder = PACKAGE_DIR / name
        out += sorted(p for p in folder.iterdir() if p.is_file() and _package_module(name, p) not in allowed)
        out += sorted(p for c in _caches(folder) for p in c.glob("*.pyc") if _package_module(name, p) not in allowed)
    out += [PACKAGE_DIR / f"{name}.py" for name in stems if (PACKAGE_DIR / f"{name}.py").is_file()]
    out += sorted(p for name in stems for cache in _caches(PACKAGE_DIR) for p in cache.glob(f"{name}.*.pyc"))
    grade = PACKAGE_DIR / "grade"
    kept = SUBJECT_MODULES | SUBJECT_RUNS_ON | {"__init__", "__main__"}
    out += sorted(p for p in grade.glob("*.py") if p.stem not in kept)
    out += sorted(p for cache in _caches(grade) for p in cache.glob("*.pyc") if p.name.split(".", 1)[0] not in kept)
    return out + sorted(forbidden_files(exercise_id))


def _real(path) -> Path | None:
    """The file an audited ``open`` names, links resolved; None for a descriptor or no name."""
    if isinstance(path, int) or path is None:
        return None
    try:
        return Path(os.path.realpath(os.fsdecode(path)))
    except (TypeError, ValueError):
        return None


def path_rule(path, exercise_id: str, libraries: dict[Path, str] | None = None) -> str | None:
    """Why opening ``path`` is refused: a file of a refused module, or a checkout's answers."""
    real = _real(path)
    if real is None:
        return None
    for place, why in (libraries or {}).items():
        if real == place or place in real.parents:
            return why
    if (CHECKOUT / "pyproject.toml").is_file():  # an editable install: the repository's other folders
        for folder in CHECKOUT_KEYS:
            if real == CHECKOUT / folder or (CHECKOUT / folder) in real.parents:
                return WHY_CHECKOUT
    if PACKAGE_DIR not in real.parents:
        return None
    parts = list(real.relative_to(PACKAGE_DIR).parts)
    if parts and parts[-1] != "__pycache__":
        stem = parts[-1].split(".", 1)[0]  # numerics.py, numerics.cpython-311.pyc
        parts = [p for p in parts[:-1] if p != "__pycache__"] + ([] if stem == "__init__" else [stem])
    return _package_rule(".".join(parts), exercise_id)


def _module_of(path) -> str | None:
    """``minitorch_cuda.x.y`` for a file of the package (its .py, its .pyc, a data file), else None."""
    real = _real(path)
    if real is None:
        return None
    if PACKAGE_DIR not in real.parents:
        return None
    parts = [p for p in real.relative_to(PACKAGE_DIR).parts if p != "__pycache__"]
    stem = parts[-1].split(".", 1)[0]
    return ".".join([PACKAGE, *parts[:-1], *([] if stem == "__init__" else [stem])])


class _Reach:
    """Whether the student's code is the one asking: the nearest frame that is neither the standard
    library's nor an installed package's (numpy, importlib, pathlib pass it on) is the student's
    (the cell, code it compiled since, a file it wrote) and not the framework's."""

    def __init__(self, library_dirs: list[str]):
        import site
        import sysconfig

        self.library_dirs = tuple(d.rstrip("/") + "/" for d in library_dirs)
        self.framework = str(PACKAGE_DIR) + "/"
        paths = sysconfig.get_paths()
        self.stdlib = tuple({os.path.realpath(paths[k]) + "/" for k in ("stdlib", "platstdlib")} | {
            paths[k].rstrip("/") + "/" for k in ("stdlib", "platstdlib")})  # fmt: skip
        packages = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
        self.packages = tuple({os.path.realpath(d) + "/" for d in packages} | {d.rstrip("/") + "/" for d in packages})
        self.busy = False  # walking the frames raises audit events of its own: not judged

    def _caller(self):
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename == __file__:  # this module's own
            frame = frame.f_back
        return frame

    def by_import(self) -> bool:
        """Whether the import system itself asks (compiling a module it loads)."""
        self.busy = True
        try:
            frame = self._caller()
            return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")
        finally:
            self.busy = False

    def _nearest(self, passed_on) -> str | None:
        """The file of the nearest frame whose file ``passed_on`` does not pass on (None: no such frame)."""
        self.busy = True
        try:
            frame = self._caller()
            while frame is not None and passed_on(frame.f_code.co_filename):
                frame = frame.f_back
            return None if frame is None else frame.f_code.co_filename
        finally:
            self.busy = False

    def package_asking(self) -> bool:
        """Whether the nearest frame past the standard library (ctypes is part of it) is an installed
        package's or the framework's own code (Triton's driver probe), not the student's."""
        name = self._nearest(
            lambda n: n not in student_files and not n.startswith(self.packages)
            and (n.startswith(self.stdlib) or n.startswith("<frozen "))
        )  # fmt: skip
        return name is not None and name not in student_files and name.startswith((*self.packages, self.framework))

    def student_asking(self) -> bool:
        name = self._nearest(
            lambda n: n not in student_files and not n.startswith(self.framework)
            and (n.startswith(self.library_dirs) or n.startswith("<frozen "))
        )  # fmt: skip
        return name is not None and (name in student_files or not name.startswith(self.framework))


class _RefusingFinder:
    """First on ``sys.meta_path``: ``importlib.import_module(name)`` asks it before any finder (the
    audit hook sees only the imports that module makes in turn, and the files it opens)."""

    def __init__(self, rule):
        self.rule = rule

    def find_spec(self, name, path=None, target=None):
        why = self.rule(name)
        if why is not None:
            refusals.append(f"importing {name} was refused: {why}")
            raise Refused(refusals[-1])
        return None


def _rules(exercise_id: str, library_dirs: list[str]):
    """(import_rule, framework_rule, reach, libraries) of ``exercise_id``, made anew at each call."""
    libraries = forbidden_files(exercise_id)
    loaded = frozenset(name for name in sys.modules if name.startswith(PACKAGE))
    allowed = frozenset(f"{PACKAGE}.{name}" for name in SETUP_MODULES | ALLOWED.get(exercise_id, set()))
    reach = _Reach(list(library_dirs))

    def framework_rule(module: str | None) -> str | None:
        """A framework module the subject did not load before the cell, asked for by the student."""
        if module is None or module in loaded or module in allowed or not module.startswith(PACKAGE + "."):
            return None
        return WHY_FRAMEWORK if reach.student_asking() else None

    def import_rule(name: str) -> str | None:
        return module_rule(name, exercise_id) or framework_rule(name)

    return import_rule, framework_rule, reach, libraries


def _folder_rule(path, reach: _Reach) -> str | None:
    """Why the student's code may not open ``path``: a folder (its descriptor would open the files in
    it by relative names, which no rule on a path sees)."""
    real = _real(path)
    return WHY_FOLDER if real is not None and os.path.isdir(real) and reach.student_asking() else None


# The exercises whose installed packages use ctypes themselves: 20.2's Triton probes for the CUDA
# driver as it launches (on a GPU machine; an interpreted launch all the same). Only there: elsewhere
# a package that calls what it is given (numpy.vectorize) would call ctypes functions for the student.
PACKAGE_CTYPES = {"20.2"}
SYSTEM_LIBRARIES = ("/usr/", "/lib/", "/lib64/", "/opt/")  # read-only in the sandbox, as the installed packages


def _library_rule(event: str, args: tuple) -> str | None:
    """Why a package may not open this library for the student's code: a file outside the system's
    and the installed packages' folders, which the student's code could have written (its own
    native code). Libraries named without a folder are found by the loader in the system's."""
    if event != "ctypes.dlopen" or not args or not isinstance(args[0], str) or "/" not in args[0]:
        return None
    real = os.path.realpath(args[0])
    prefixes = (*SYSTEM_LIBRARIES, *(os.path.realpath(d) + "/" for d in (sys.prefix, sys.base_prefix)))
    return None if real.startswith(prefixes) else WHY_INTERNALS


def _install_hook(exercise_id: str, counted: bool, library_dirs: list[str], compiled: set[str]) -> None:
    """The audit hook of ``install``, run from ``_private_namespace()``."""
    import_rule, framework_rule, reach, libraries = _rules(exercise_id, library_dirs)

    def hook(event: str, args: tuple) -> None:
        if reach.busy:
            return
        why = None
        if event == "compile" and len(args) > 1 and isinstance(args[1], str) and not reach.by_import():
            compiled.add(args[1])
        elif event == "import":
            why = import_rule(str(args[0]))
            what = f"importing {args[0]}"
        elif event == "open":
            why = path_rule(args[0], exercise_id, libraries) or framework_rule(_module_of(args[0]))
            why = why or _folder_rule(args[0], reach)
            what = f"opening {args[0]!r}"
        elif event in PROCESS_EVENTS:
            why, what = WHY_PROCESS, event
        elif event.startswith("ctypes.") and exercise_id in PACKAGE_CTYPES and reach.package_asking():
            why, what = _library_rule(event, args), event  # an installed package's own use
        elif event.startswith("ctypes.") or event in INTERNALS_EVENTS:
            why, what = WHY_INTERNALS, event
        elif (
            (counted or (exercise_id in FRAMES_GUARDED and not reach.package_asking()))
            and (event in COUNTER_EVENTS or (event == "object.__getattr__" and str(args[1]) in FRAME_ATTRIBUTES))
            and not reach.by_import()  # (the import system unmarshals the modules it loads)
        ):
            why, what = WHY_COUNTER, event if event != "object.__getattr__" else f"reading .{args[1]}"
        if why is not None:
            refusals.append(f"{what} was refused: {why}")
            raise Refused(refusals[-1])

    sys.addaudithook(hook)


def _private_namespace() -> dict:
    """This module's functions, classes and tables bound to a namespace of their own: code that reaches
    the module (``sys.modules``) and changes a table or a function of it (``PACKAGE``, ``FORBIDDEN``,
    ``_Reach.student_asking``) changes nothing of what the hook, made there, decides. ``refusals``
    stays shared: it only reports what was refused."""
    import copy
    import types

    space = {}
    for name, value in globals().items():
        shared = name == "refusals" or name.startswith("__") or isinstance(value, types.ModuleType)
        space[name] = copy.deepcopy(value) if isinstance(value, (dict, set, list)) and not shared else value

    def bound(fn: types.FunctionType) -> types.FunctionType:
        return types.FunctionType(fn.__code__, space, fn.__name__, fn.__defaults__, fn.__closure__)

    for name, value in list(space.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == __name__:
            space[name] = bound(value)
        elif isinstance(value, type) and value.__module__ == __name__ and not issubclass(value, BaseException):
            body = {k: bound(v) if isinstance(v, types.FunctionType) else v for k, v in vars(value).items()}
            body.pop("__dict__", None), body.pop("__weakref__", None)
            space[name] = type(value.__name__, value.__bases__, body)
    return space


def install(
    exercise_id: str, counted: bool = False, library_dirs: list[str] = (), compiled: set[str] | None = None
) -> None:
    """Refuse from now on what ``exercise_id`` rules out (an audit hook stays for the process's life);
    ``counted``: the check counts the student's Python lines (``python_work``). ``library_dirs``:
    where installed code lives (the standard library, site-packages). ``compiled``: the set that takes
    the file names the student's code compiles (``student_files`` by default; the subject passes
    the line counter's own, which no module holds)."""
    exercise_id, library_dirs = str(exercise_id), list(library_dirs)
    # the finder's rule is a copy of its own: what code does to it (it sits on sys.meta_path, its
    # closures open) changes nothing of the hook's, made apart and reachable from nowhere
    finder = _RefusingFinder(_rules(exercise_id, library_dirs)[0])
    space = _private_namespace()
    space["student_files"] = student_files if compiled is None else compiled  # (_Reach reads it too)
    space["_install_hook"](exercise_id, counted, library_dirs, space["student_files"])
    sys.meta_path.insert(0, finder)
