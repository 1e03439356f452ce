"""What a student's kernel compiled to: the facts the kernel rules read, never the source's spelling.

``Artifact`` holds the ``__global__`` entries and their parameters, the course headers the
preprocessor opened, and whether the code uses shared memory, warp shuffles and atomics. Two
readers fill it in:

* ``from_ptx``: the PTX nvcc wrote for the GPU (``.entry`` and its ``.param`` list; the
  instructions ``ld/st/atom.shared``, ``shfl.sync``, ``atom.``/``red.``). With ``-lineinfo`` every
  instruction carries its ``.loc`` (and the chain of call sites it was inlined at), so an atomic
  that a course header performs (``grid_barrier``'s counter) is told apart from the student's own.
* ``from_preprocessed``: the text the CPU emulator compiles, after its preprocessor (comments,
  ``#if 0`` blocks and macros already gone): the student's own lines, told by the line markers.

Either way a requirement met only in a comment or a dead ``#if 0`` block is not met, and an
operation behind a macro or another spelling (an ``atomicCAS`` loop) is seen for what it is.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from pathlib import Path

from ..cuda.kernel_table import entry_params, prepare_signature
from ..emulator import toolchain


@dataclasses.dataclass(frozen=True)
class Artifact:
    entries: dict[str, tuple[str, ...]]  # every __global__ entry -> its parameters as prepare() codes (P, i, f, 128s)
    headers: frozenset[str]  # the course headers the preprocessor opened, by name ("grid_barrier.cuh")
    uses_shared: bool  # reads or writes shared memory
    uses_shuffle: bool  # a warp shuffle (__shfl_*_sync)
    own_atomics: tuple[str, ...]  # atomic operations of the student's own code (not a course header's)
    calls: frozenset[str]  # the device functions the code calls (inlined or not), by their plain name
    moves_16_bytes: bool  # loads and stores global memory 16 bytes at a time (float4)

    def signature(self, entry: str) -> tuple[str, ...] | None:
        return self.entries.get(entry)


def same_signature(compiled: tuple[str, ...], params: str) -> bool:
    """Whether ``compiled`` (prepare() codes of an artifact) matches the C parameters ``params``;
    int and unsigned are one 32-bit kind in PTX."""
    return "".join(compiled).replace("I", "i") == prepare_signature(params).replace("I", "i")


# --- the GPU: PTX ---------------------------------------------------------------------------

_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+\w+(?:\[(\d+)\])?")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")
_INFO_STRING = re.compile(r"^(\$L__info_string\d+):\s*\n((?:\.b8[^\n]*\n)+)", re.M)
_FUNCTION_NAME = re.compile(r"function_name\s+(\$L__info_string\d+)")
_CALL = re.compile(r"^\s*(?:@!?%\w+\s+)?call(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([\w$]+)", re.M)  # over lines
_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")
_WIDE = re.compile(r"(ld|st)\.global(\.\w+)*\.(v4\.(f32|b32|u32|s32)|v2\.(f64|b64|u64|s64))$")
_PTX_TYPES = {"u64": "P", "s64": "P", "b64": "P", "u32": "i", "s32": "i", "b32": "i", "f32": "f"}


def _plain_name(symbol: str) -> str:
    """``_Z12grid_barrierP11GridBarrier`` -> ``grid_barrier`` (the last part of a nested name:
    ``_ZN2ns9atomicAddEPjj`` -> ``atomicAdd``); a C name stays as it is."""
    if not symbol.startswith("_Z"):
        return symbol
    rest, name = symbol[2:].lstrip("NLK"), symbol
    while (m := re.match(r"\d+", rest)) is not None:
        size = int(m.group())
        name, rest = rest[m.end() : m.end() + size], rest[m.end() + size :]
    return name


def _info_strings(ptx: str) -> dict[str, str]:
    """The debug strings (the mangled names of inlined functions), from their ``.b8`` bytes."""
    out = {}
    for label, body in _INFO_STRING.findall(ptx):
        data = bytes(int(b) for b in re.findall(r"\d+", body.replace(".b8", " ")))
        out[label] = data.split(b"\0")[0].decode(errors="replace")
    return out


def from_ptx(ptx: str, headers: Path, opened: frozenset[str]) -> Artifact:
    """The artifact of nvcc's PTX (built with ``-lineinfo``); ``headers`` is the course's header folder,
    ``opened`` the headers of it that the preprocessor opened."""
    entries = {}
    for name, params in _ENTRY.findall(ptx):
        codes = []
        for kind, size in _PARAM.findall(params):
            codes.append(f"{size}s" if size else _PTX_TYPES.get(kind, f".{kind}"))
        entries[name] = tuple(codes)
    files = {int(n): path for n, path in _FILE.findall(ptx)}
    folder = str(headers)
    course = {n for n, path in files.items() if path.startswith(folder + "/") or Path(path).parent == headers}
    names = _info_strings(ptx)
    parent: dict[tuple, tuple | None] = {}  # a location -> the call site it was last seen inlined at
    chain: list[tuple] = []  # the current instruction's location, then its call sites outwards
    shared = shuffle = False
    wide = set()  # "ld" / "st" where global memory is moved 16 bytes at a time
    atomics: list[str] = []
    calls: set[str] = set()
    for line in ptx.splitlines():
        loc = _LOC.match(line)
        if loc:
            here = tuple(int(v) for v in loc.group(1, 2, 3))
            site = tuple(int(v) for v in loc.group(4, 5, 6)) if loc.group(4) else None
            parent[here] = site
            chain, at = [here], site
            while at is not None and at not in chain and len(chain) < 64:
                chain.append(at)
                at = parent.get(at)
            named = _FUNCTION_NAME.search(line)
            if named and named.group(1) in names:
                calls.add(_plain_name(names[named.group(1)]))
            continue
        op = _OPCODE.match(line)
        if op is None or line.lstrip().startswith((".", "//", "$")):
            continue
        opcode = op.group(1)
        if ".shared" in opcode:
            shared = True
        if opcode.startswith("shfl."):
            shuffle = True
        if _WIDE.match(opcode):
            wide.add(opcode[:2])
        if opcode.startswith(("atom.", "red.")) or ".red." in opcode:
            if not any(f in course for f, _, _ in chain):  # a course header's own (the barrier's counter)
                atomics.append(opcode)
    calls |= {_plain_name(target) for target in _CALL.findall(ptx)}  # calls not inlined
    return Artifact(entries, opened, shared, shuffle, tuple(atomics), frozenset(calls), wide == {"ld", "st"})


# --- the CPU emulator: its preprocessed text --------------------------------------------------

# What a literal says is no code: raw strings, strings, characters, and numbers with digit separators
# (1'000, which a scan for character literals would take for one), tried in that order at each place.
_LITERAL = re.compile(
    r"""(?:u8|[uUL])?R"(?P<delimiter>[^()\\\s]{0,16})\(.*?\)(?P=delimiter)"
    |(?:u8|[uUL])?"(?:\\.|[^"\\\n])*"
    |(?:u8|[uUL])?'(?:\\.|[^'\\\n])*'
    |(?<![\w.])\.?\d(?:[eEpP][+-]|'?[\w.])*""",
    re.S | re.X,
)
_MARKER = re.compile(r'^#(?: line)? \d+ "[^\n]*$', re.M)
_SHARED = re.compile(r"\b__shared__\b")
_SHUFFLE = re.compile(r"\b__shfl\w*")
_ATOMIC = re.compile(r"\b(atomic[A-Z]\w*|__atomic_\w+|__sync_\w+|__nv_atomic\w*|(?:std|cuda)::atomic\w*)\b")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")
_FLOAT4 = re.compile(r"\bfloat4\b")
# The emulator's own code: what a kernel could reach through it is the checks' state (emulator/cuda_emu.h)
_INTERNAL = re.compile(r"\bemu\b|\b__(?:emu|tsan|ubsan|asan|sanitizer)_\w*")
# How cuda_emu.h's index variables read once preprocessed: the exact text of their #defines
_INDEX_EXPANSIONS = dict(
    re.findall(
        r"^#define (threadIdx|blockIdx|blockDim|gridDim) (.*?)\s*$",
        toolchain.HEADER.read_text(),
        re.M,
    )
)
# GCC's attributes that leave a function without the sanitizer calls the emulator's checks are made
# of, and the builtins whose memory accesses those calls never see: the copies g++ expands inline
# after placing them (a kernel's plain memcpy or memset stays a call that race checking sees:
# emulator/kernel_memory.cpp), and x86's vector loads and stores
_UNCHECKED = re.compile(
    r"\b_*(?:no_sanitize\w*|no_address_safety_analysis)_*\b"
    r"|\b__builtin_+(?:mem|str|stp|wmem|bcopy|bzero|ia32_)\w*"
)


def _code(text: str) -> str:
    """Preprocessed text without its line markers and what its strings say (``extern "C"`` stays)."""

    def blank(m: re.Match) -> str:
        return m[0] if m[0] == '"C"' else "0" if m[0][-1] not in "\"'" else '""'

    return _LITERAL.sub(blank, _MARKER.sub("", text))


def added(pattern: re.Pattern, code: str, base: str) -> list[str]:
    """The matches of ``pattern`` in preprocessed ``code`` beyond those of ``base`` (both through
    ``_code``): what the student's code adds to a baseline that only includes its headers."""
    extra = collections.Counter(pattern.findall(code))
    extra.subtract(collections.Counter(pattern.findall(base)))
    return sorted(name for name, n in extra.items() if n > 0)


def unchecked(text: str, baseline: str) -> list[str]:
    """The attributes in the emulator's preprocessed ``text``, beyond ``baseline``'s, that switch off
    the checks g++ compiles into a kernel for the emulator (race checking's calls, the bounds checks)."""
    return added(_UNCHECKED, _code(text), _code(baseline))


def emulator_internals(text: str, baseline: str) -> list[str]:
    """The names of the emulator's own code (its ``emu`` namespace, its runtime's and the sanitizers'
    entry points) in the emulator's preprocessed ``text`` beyond ``baseline``'s, once the index
    variables are put back as the names a kernel writes (``threadIdx`` expands into the namespace)."""

    def written(code: str) -> str:
        for name, expansion in _INDEX_EXPANSIONS.items():
            code = code.replace(expansion, name)
        return code

    return added(_INTERNAL, written(_code(text)), written(_code(baseline)))


def from_preprocessed(text: str, baseline: str, opened: frozenset[str]) -> Artifact:
    """The artifact of the emulator's preprocessed ``text``. ``baseline`` is the same preprocessing of a
    source that only includes ``opened`` (the course headers the student's opened): what the text holds
    beyond it is the student's, however its line markers name the files (a ``#line`` may rename any)."""
    code, base = _code(text), _code(baseline)

    def more(pattern: re.Pattern) -> list[str]:
        return added(pattern, code, base)

    from ..emulator.compiler import kernels

    entries = {}
    for name in set(kernels(code, c_linkage_only=True)) - set(kernels(base, c_linkage_only=True)):
        try:
            entries[name] = tuple(re.findall(r"\d+s|.", prepare_signature(entry_params(code, name))))
        except (TypeError, ValueError) as exc:
            entries[name] = (str(exc),)
    return Artifact(
        entries,
        opened,
        bool(more(_SHARED)),
        bool(more(_SHUFFLE)),
        tuple(more(_ATOMIC)),
        frozenset(more(_CALLED)),
        bool(more(_FLOAT4)),  # (the CPU's own loads tell nothing of a GPU's)
    )
