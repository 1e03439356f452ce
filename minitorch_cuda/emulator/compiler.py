"""``SourceModule`` for the CPU emulator: the same ``.cu`` source, built by g++ as C++.

A build has three steps:

1. preprocess the source with ``cuda_emu.h`` force-included (``g++ -E``), with
   ``__global__``, ``__shared__``, ``__launch_bounds__`` and ``__cluster_dims__`` left as plain words;
2. scan the result: rewrite the inline PTX it models (ptx.py: mma.sync, cp.async, ...) into
   calls of ``ptx.h`` and refuse what it does not model, naming the construct and the line; find every
   ``extern "C" __global__`` kernel, its launch bounds and cluster shape; turn each
   ``extern __shared__`` array into a pointer to the block's dynamic shared memory,
   and have each static ``__shared__`` variable poisoned at the start of every block
   (as the runtime poisons the dynamic one), so a read before any write finds
   cuda_emu.h's kSharedPoison (NaN as a float), whatever block ran before;
3. compile that text, plus one launch entry per kernel, into a shared library with
   g++'s bounds and alignment checks (and, for race checking, ThreadSanitizer's calls:
   ``RACECHECK``; for access tracing, the same calls: ``TRACE``), cached on disk by the hash of
   what is compiled (so a test run builds each kernel file once, as nvcc's cache does).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import emulator
from . import device_process, driver, ptx, toolchain
from .errors import CompileError, LogicError
from .toolchain import CHECKS, CXX, CXXFLAGS, HEADER, HERE, INCLUDE, KERNEL_MEMORY, MAIN, PTX_HEADER, RACECHECK, TRACE

DEFINES = {
    "__global__": "",
    "__shared__": "static thread_local",  # every fiber of a block runs on the block's OS thread
    "__launch_bounds__(...)": "",
    "__cluster_dims__(...)": "",  # read by kernels(): the runtime launches the clusters
}
# (pattern in the preprocessed source, what is not modelled)
UNSUPPORTED = [
    # include/cooperative_groups.h models thread block clusters only
    (r"\b(?:cooperative_groups|cg)::(?!this_cluster\b|cluster_group\b)\w+", "cooperative groups other than clusters"),
]


# Called with every kernel library's path before it is loaded (here, or in the device process where
# device_process.isolate() was called), to refuse it by raising (grade/native.py's early refusal of
# host code); None loads every one.
before_load: Callable[[Path], None] | None = None
# Set by the grader while it builds a student's kernel (grade/kernel_build.py), else None:
# ``run_compiler(argv, folder)`` runs each g++ command in its sandbox, and ``on_preprocessed(text)``
# reads the preprocessed source before it is compiled (what it opened, what it uses), and may refuse it.
run_compiler: Callable[[list[str], str], subprocess.CompletedProcess] | None = None
on_preprocessed: Callable[[str], None] | None = None


def _options(options: list[str] | None, include_dirs: list[str]) -> list[str]:
    """The nvcc options that mean something on the CPU (-D, -U, -I); the rest choose GPU code."""
    kept = [f"-I{os.path.abspath(d)}" for d in include_dirs]  # g++ runs in a scratch directory
    for option in options or []:
        if option.startswith("-I"):
            kept.append(f"-I{os.path.abspath(option[2:])}")
        elif re.match(r"-[DU]", option):
            kept.append(option)
    return kept


def _refusal(what: str, file: str, line: int, raw: str, needs: str = "") -> CompileError:
    """The CompileError that refuses ``what`` at ``file``'s ``line`` (``raw``: its text); ``needs``:
    the chapter's section whose kernels need a GPU for it."""
    where = f"{Path(file).name} line {line}"
    gpu = f"a kernel that uses it needs a GPU ({needs})" if needs else "a kernel that uses it needs a GPU"
    return CompileError(
        f"the CPU emulator does not model {what} ({where}: {raw.strip()[:80]}); {gpu}",
        stderr=f"{MAIN}({line}): error: the CPU emulator does not model {what} ({where}); {gpu}"
        if file == MAIN
        else f"{where}: error: the CPU emulator does not model {what}; {gpu}",
    )


def _lines(text: str):
    """(offset, file, line, from a system header) of each line of the preprocessed text that is source."""
    file, line, system, offset = MAIN, 0, False, 0
    for raw in text.splitlines(keepends=True):
        marker = re.match(r'# (\d+) "([^"]*)"(.*)', raw)
        if marker:
            file, line = marker.group(2), int(marker.group(1)) - 1
            system = "3" in marker.group(3).split() or file.startswith(str(HERE))
        else:
            line += 1
            yield offset, file, line, system
        offset += len(raw)


def _lower_ptx(text: str) -> str:
    """The text with the inline PTX the emulator models rewritten (ptx.lower); refuses the rest."""
    system, spans = [], [(offset, sys) for offset, _, _, sys in _lines(text)] + [(len(text), False)]
    for i, ((offset, sys), (end, _)) in enumerate(zip(spans, spans[1:])):
        if sys and i and spans[i - 1][1]:  # the line before was a system header's too: one span
            system[-1] = (system[-1][0], end)
        elif sys:
            system.append((offset, end))
    try:
        return ptx.lower(text, max(0, text.find(f'\n# 1 "{MAIN}"', text.find(f'"{PTX_HEADER}"'))), system)
    except ptx.Refused as refused:
        offset, file, line, _ = next(x for x in reversed(list(_lines(text))) if x[0] <= refused.at)
        raw = text[refused.at : text.find("\n", refused.at)]
        raise _refusal(refused.what, file, line, raw, refused.section) from None


def _refuse(text: str) -> None:
    """CompileError for the first construct of the user's files that the emulator does not model."""
    for offset, file, line, system in _lines(text):
        raw = text[offset : text.find("\n", offset)]
        what = None if system else next((w for pattern, w in UNSUPPORTED if re.search(pattern, raw)), None)
        if what:
            raise _refusal(what, file, line, raw)


_NESTED = r"(?:[^()]|\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\))*"  # an attribute's arguments: 3 levels of parentheses
_BOUNDS = re.compile(rf"__launch_bounds__\s*\(({_NESTED})\)")
_CLUSTER = re.compile(rf"__cluster_dims__\s*\(({_NESTED})\)")
_ATTRIBUTES = rf"(?:(?:__launch_bounds__|__cluster_dims__)\s*\({_NESTED}\)\s*)*"
_KERNEL = re.compile(rf'(extern\s+"C"\s+)?__global__\s+({_ATTRIBUTES}void\s+{_ATTRIBUTES})(\w+)\s*\(')
_DYNAMIC = re.compile(r"extern\s+__shared__\s+([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;")


def kernels(text: str, c_linkage_only: bool) -> dict[str, tuple[str | None, str | None]]:
    """{kernel name: (its __launch_bounds__ arguments, its __cluster_dims__ arguments), each or None}
    of the preprocessed text. A kernel without ``extern "C"`` has a mangled name that get_function
    cannot find (as on a GPU)."""
    found = {}
    for m in _KERNEL.finditer(text):
        if m.group(1) or not c_linkage_only:
            bounds, cluster = _BOUNDS.search(m.group(2)), _CLUSTER.search(m.group(2))
            found[m.group(3)] = (bounds and bounds.group(1), cluster and cluster.group(1))
    return found


# What the scopes of the preprocessed text are told by: braces, and string literals to step over.
_SCOPE_TOKEN = re.compile(r'[{}]|__shared__\b|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_NAMESPACE = re.compile(r'\bnamespace\b\s*([\w:]*)\s*$|\bextern\s*"[^"]*"\s*$')
# Follows each static __shared__ declaration inside a function, on its line (so g++'s line
# numbers stay the source's), and opens each kernel's entry for those at namespace scope:
# poisons the variables when the block's first thread gets there.
POISON = " {{ static thread_local unsigned long long __emu_poisoned; emu::poison_shared(__emu_poisoned, {}); }}"


def _opened(head: str) -> str | None:
    """What the ``{`` after ``head`` opens: a namespace's qualifier ("" for extern "C" or an anonymous
    namespace), or None for anything else (a function body, a class)."""
    if "namespace" not in head and "extern" not in head:
        return None
    opens = _NAMESPACE.search(_ATTRIBUTE.sub("", head))
    return f"{opens[1]}::" if opens and opens[1] else "" if opens else None


def _declaration_end(text: str, start: int) -> int:
    """Where the declaration from ``start`` ends: its ``;`` outside brackets (the end of the text if none)."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] in "([{"
        depth -= text[i] in ")]}"
        if text[i] == ";" and depth == 0:
            return i
    return len(text)


def _declared_names(declaration: str) -> list[str]:
    """The names that the text after ``__shared__`` declares: ``__align__(16) float a[2][8], b`` -> a, b."""
    parts, depth, angle, part = [], 0, 0, ""
    for c in _ATTRIBUTE.sub(" ", declaration) + ",":
        depth += c in "([{"
        depth -= c in ")]}"
        angle += depth == 0 and c == "<"  # template arguments: outside brackets, the only < and >
        angle -= depth == 0 and c == ">"
        if c == "," and depth == 0 and angle == 0:
            parts.append(part)
            part = ""
        else:
            part += c
    return [name for part in parts for name in re.findall(r"\w+", re.split(r"[\[=]", part)[0])[-1:]]


def _dynamic(m: re.Match, namespace: str | None) -> str:
    """``extern __shared__ T name[];`` -> a pointer to the running block's dynamic shared memory (at
    namespace scope a macro, since there is no block to ask while the library loads)."""
    kind = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", m.group(1)).strip()
    pointer = f"reinterpret_cast<{kind}*>(emu::self()->block->dynamic_shared)"
    if namespace is not None:
        return f"\n#define {m.group(2)} ({pointer})\n"
    return f"{kind}* const {m.group(2)} = {pointer};"


def _shared(text: str) -> tuple[str, list[str]]:
    """The preprocessed text with shared memory made per block, and the static ``__shared__`` variables
    at namespace scope, which each kernel's entry poisons. A static one is ``static thread_local``: one
    copy per worker, poisoned at the start of every block (POISON); a dynamic one: see _dynamic."""
    scopes: list[str | None] = []  # per open brace: what _opened says of the text before it
    edits, file_scope, read = [], [], 0  # read: the end of the last __shared__ declaration
    # Most of the text is cuda_emu.h and the headers it includes, which are balanced: start after them.
    source = max(0, text.find(f'\n# 1 "{MAIN}"', text.find(f'"{HEADER}"')))
    for m in _SCOPE_TOKEN.finditer(text, source):
        start = m.start()
        if start < read or m[0][0] in "\"'":
            continue
        if m[0] == "{":
            scopes.append(_opened(text[max(0, start - 200) : start]))
        elif m[0] == "}":
            scopes = scopes[:-1]
        elif not re.match(r"\w", text[start - 1]):  # not the end of a longer name
            namespace = None if None in scopes else "".join(scopes)  # None: inside a function
            read = _declaration_end(text, m.end()) + 1
            extern = re.search(r"\bextern\s+$", text[max(0, start - 40) : start])
            dynamic = extern and _DYNAMIC.match(text, start - len(extern[0]), read)
            if dynamic:
                edits.append((dynamic.start(), dynamic.end(), _dynamic(dynamic, namespace)))
            elif not extern:
                names = _declared_names(text[m.end() : read - 1])
                if namespace is not None:
                    file_scope += [namespace + name for name in names]
                elif names:
                    edits.append((read, read, POISON.format(", ".join(names))))
    pieces, kept = [], 0  # the text up to each edit (they are in order), then its replacement
    for start, stop, replacement in edits:
        pieces += [text[kept:start], replacement]
        kept = stop
    return "".join(pieces) + text[kept:], file_scope


class Library:
    """A compiled kernel library: its launch entries and launch bounds, by kernel name."""

    def __init__(
        self,
        path: Path,
        kernels: dict[str, tuple[str | None, str | None]],
        source: str = "",
        racecheck: bool = False,
        trace: bool = False,
        options: list[str] = (),
    ):
        self.path, self.source = path, source  # for the source line of a fault (driver.fault_line)
        self.racecheck = racecheck  # built for race checking: its launches say so to the runtime
        self.trace = trace  # built for access tracing (trace.cpp): its launches count every access
        self.options = list(options)  # what it was built with, for its build for tracing
        self._traced: Library | None = None
        self.names = set(kernels)
        process = device_process.current()
        if process is not None:  # loaded by the device process only (its numbers are what it says)
            found = process.load(path, sorted(kernels))
            self._entries = {name: entry for name, (entry, _, _) in found.items()}
            self.max_threads = {name: bounds or 1024 for name, (_, bounds, _) in found.items()}
            self.cluster = {name: cluster for name, (_, _, cluster) in found.items()}
            return
        self.cdll = ctypes.CDLL(str(path))
        self.max_threads = {
            name: ctypes.c_int.in_dll(self.cdll, f"__emu_bounds_{name}").value if bounds else 1024
            for name, (bounds, _) in kernels.items()
        }
        self.cluster = {  # __cluster_dims__: the blocks of each cluster, x, y and z
            name: tuple((ctypes.c_uint * 3).in_dll(self.cdll, f"__emu_cluster_{name}")) if cluster else (1, 1, 1)
            for name, (_, cluster) in kernels.items()
        }

    def traced(self) -> Library:
        """This library built again for access tracing (itself if it was), from the source and options
        it was built with, once (the grader builds a student's in its sandbox first:
        grade/kernel_build.build_traced)."""
        if self.trace:
            return self
        if self._traced is None:
            self._traced = build(self.source, self.options, no_extern_c=True, trace=True)
        return self._traced

    def entry(self, name: str):
        """The kernel's launch entry: a function of this process, or its address in the device process."""
        if not hasattr(self, "cdll"):
            return self._entries[name]
        return getattr(self.cdll, f"__emu_entry_{name}")


def build(
    source: str,
    options: list[str] | None = None,
    include_dirs: list[str] = (),
    no_extern_c: bool = False,
    cache_dir: str | None = None,
    trace: bool = False,
) -> Library:
    """The kernel library of ``source``; with ``trace``, built for access tracing (access.py) instead of
    what MINITORCH_CUDA_RACECHECK selects."""
    toolchain.runtime_library()  # kernel libraries resolve the runtime's symbols against it
    if not no_extern_c:  # PyCUDA's default, as in pycuda.compiler
        source = 'extern "C" {\n' + source + "\n}\n"
    flags = _options(options, list(include_dirs))
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, MAIN).write_text(source)
        scan = [CXX, "-E", "-x", "c++", "-std=c++17", "-isystem", str(INCLUDE), "-include", str(HEADER),
                "-include", str(PTX_HEADER), *flags, MAIN]  # fmt: skip
        try:
            text = toolchain.run(scan, tmp, "preprocessing for the CPU emulator", run_compiler)
        except CompileError as exc:  # an include/ header that refuses itself: say only that
            refused = re.search(r'error: #error "(the CPU emulator does not model[^"]*)"', exc.stderr)
            included = re.search(rf"included from {re.escape(MAIN)}:(\d+)", exc.stderr)
            if refused is None:
                raise
            where = f"{MAIN}({included.group(1)}): " if included else ""
            raise CompileError(refused.group(1), exc.command_line, "", f"{where}error: {refused.group(1)}") from None
        if on_preprocessed is not None:
            on_preprocessed(text)
        text = _lower_ptx(text)
        _refuse(text)
        found = kernels(text, c_linkage_only=no_extern_c)
        body, file_scope = _shared(text)
        unit = "".join(f"#define {k} {v}\n" for k, v in DEFINES.items()) + body
        poison = POISON.format(", ".join(file_scope)) if file_scope else ""
        for name, (bounds, cluster) in found.items():
            unit += f'\nextern "C" void __emu_entry_{name}(void** args) {{{poison} emu::invoke({name}, args); }}\n'
            if bounds:
                unit += f'extern "C" const int __emu_bounds_{name} = emu::launch_bound({bounds});\n'
            if cluster:
                unit += f'extern "C" const uint3 __emu_cluster_{name} = emu::cluster_dims({cluster});\n'
        racecheck = emulator.racecheck_selected() and not trace
        # line tables, so that a fault names its line; DWARF 4, since binutils 2.40's addr2line misnumbers
        # a DWARF 5 table's files (it named unit.cpp for the kernel's reads)
        compile_flags = [*CXXFLAGS, *CHECKS, "-g1", "-gdwarf-4", "-w", "-shared"]
        compile_flags += TRACE if trace else RACECHECK if racecheck else []
        linked = KERNEL_MEMORY.read_text() if racecheck or trace else ""
        key = hashlib.sha256("\0".join([unit, linked, *compile_flags, toolchain.compiler_version()]).encode())
        key = key.hexdigest()[:24]
        path = toolchain.cache_dir(cache_dir) / f"kernels-{key}.so"
        if not path.exists():
            Path(tmp, "unit.cpp").write_text(unit)
            _compile_unit(compile_flags, racecheck or trace, tmp)
            toolchain.install(Path(tmp, "unit.so"), path)
    if before_load is not None:
        before_load(path)
    return Library(path, found, source, racecheck, trace, flags)


def _compile_unit(flags: list[str], instrumented: bool, tmp: str) -> None:
    """unit.cpp of ``tmp`` into unit.so; built with ThreadSanitizer's calls (race checking, tracing),
    compiled and linked apart, since g++ links ThreadSanitizer's runtime into whatever it links with
    -fsanitize=thread."""
    if not instrumented:
        toolchain.run(
            [CXX, *flags, "-x", "c++", "unit.cpp", "-o", "unit.so"], tmp, "g++ (the CPU emulator)", run_compiler
        )
        return
    compiling = [CXX, *flags, "-c", "-x", "c++", "unit.cpp", "-o", "unit.o"]
    toolchain.run(compiling, tmp, "g++ (the CPU emulator)", run_compiler)
    linking = [f for f in flags if f not in RACECHECK]
    # kernel_memory.cpp: -fno-builtin, or g++ ignores its definitions' hidden visibility (the builtins')
    linked = [*linking, "unit.o", "-fno-builtin", str(KERNEL_MEMORY), "-o", "unit.so"]
    toolchain.run([CXX, *linked], tmp, "g++ (the CPU emulator, linking)", run_compiler)


class SourceModule:
    """``pycuda.compiler.SourceModule``: ``arch`` and nvcc's code-generation options have no
    meaning on the CPU; -D, -U and -I options and ``include_dirs`` apply."""

    def __init__(
        self,
        source: str,
        nvcc: str = "nvcc",
        options: list[str] | None = None,
        keep: bool = False,
        no_extern_c: bool = False,
        arch: str | None = None,
        code: str | None = None,
        cache_dir: str | None = None,
        include_dirs: list[str] = (),
    ):
        self.library = build(source, options, include_dirs, no_extern_c, cache_dir)

    def get_function(self, name: str) -> driver.Function:
        if name not in self.library.names:
            raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({name!r})")
        return driver.Function(self.library, name)
