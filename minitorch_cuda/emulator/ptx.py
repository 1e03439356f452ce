"""Inline PTX on the CPU emulator: the instructions it models become calls of ``ptx.h``.

g++ cannot assemble PTX, so ``lower`` rewrites every ``asm(...)`` statement of a kernel's
preprocessed source (its template, with its output and input operands) into a call of the
emulator's model of that instruction, on the statement's own lines, so a student's kernel,
written as on a GPU, runs unchanged. Modelled: ``mma.sync`` m16n8k8 TF32 and m16n8k16 BF16
(``tensor_core.h``), ``cvt.rna.tf32.f32``, ``cp.async`` with its commit and wait groups,
``mov.u64 %0, %%globaltimer``, and the empty ``asm volatile("" ...)`` that only orders the
compiler. Anything else raises ``Refused``, naming the construct; chapter 19's Hopper kernels
(``wgmma``, TMA and its tensor maps and mbarriers, ``setmaxnreg``) name the section that
needs a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Chapter 19's sections whose kernels need a Hopper GPU.
WGMMA_SECTION = 'chapter 19, "A third kernel: warpgroup MMA on Hopper"'
TMA_SECTION = 'chapter 19, "A fourth kernel: TMA, mbarriers and warp specialization"'

# (the start of the PTX instruction, what it is, where the course uses it) for what is refused by name
GPU_ONLY = [
    ("wgmma", "Hopper's warpgroup tensor-core instructions (wgmma)", WGMMA_SECTION),
    ("cp.async.bulk", "the Tensor Memory Accelerator (TMA: cp.async.bulk.tensor)", TMA_SECTION),
    ("prefetch.tensormap", "TMA tensor maps (prefetch.tensormap)", TMA_SECTION),
    ("mbarrier", "shared-memory transaction barriers (mbarrier)", TMA_SECTION),
    ("setmaxnreg", "register reallocation between warpgroups (setmaxnreg)", TMA_SECTION),
    ("fence.proxy.async", "the async proxy's fences (fence.proxy.async)", TMA_SECTION),
]
# C++ names of the same Hopper features, refused where the source uses them
GPU_ONLY_NAMES = [(r"\bCUtensorMap\b|\bcuTensorMapEncode\w*", "TMA tensor maps (CUtensorMap)", TMA_SECTION)]

# the asm keyword in any spelling, then any qualifiers (volatile, __inline__, goto ... : g++ takes several)
_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s*\b[A-Za-z_]\w*\b)*\s*\(")
_STRING = re.compile(r'"((?:\\.|[^"\\])*)"')
_CHAR = re.compile(r"'(?:\\.|[^'\\])*'")
SITE = "__FILE__, __LINE__"  # the rewritten statement's own, for the model's messages


class Refused(Exception):
    """A construct the emulator does not model: ``what`` it is, at offset ``at`` of the text."""

    def __init__(self, what: str, at: int, section: str | None = None):
        super().__init__(what)
        self.what, self.at, self.section = what, at, section


@dataclass
class Operand:
    constraint: str  # "=f", "+r", "l", "n" ...
    expression: str

    def value(self) -> str:
        return f"({self.expression})"


def _close(text: str, start: int) -> int:
    """The offset just after the ``)`` that closes the ``(`` before ``start``."""
    depth, i = 1, start
    while depth:
        c = text[i]
        if c == '"' or c == "'":
            i = (_STRING if c == '"' else _CHAR).match(text, i).end()
            continue
        depth += c == "("
        depth -= c == ")"
        i += 1
    return i


def _sections(body: str) -> list[str]:
    """The asm statement's parts between top-level colons: template, outputs, inputs, clobbers."""
    parts, depth, part, i = [], 0, "", 0
    while i < len(body):
        c = body[i]
        if c == '"':
            end = _STRING.match(body, i).end()
            part, i = part + body[i:end], end
            continue
        depth += c in "(["
        depth -= c in ")]"
        if c == ":" and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += c
        i += 1
    return [*parts, part]


def _operands(section: str) -> list[Operand]:
    found = []
    for m in re.finditer(r'(?:\[\w+\]\s*)?"([^"]*)"\s*\(', section):
        end = _close(section, m.end())
        found.append(Operand(m.group(1), section[m.end() : end - 1]))
    return found


def _template(section: str) -> str:
    text = "".join(s.group(1) for s in _STRING.finditer(section))
    return re.sub(r"\\[nt]", " ", text).replace("%%", "%")


class _Statement:
    """One asm statement: its PTX (one instruction) and operands, numbered as in the template."""

    def __init__(self, body: str, at: int):
        parts = _sections(body)
        self.at = at
        self.ptx = _template(parts[0]).strip().rstrip(";").strip()
        outputs = _operands(parts[1]) if len(parts) > 1 else []
        inputs = _operands(parts[2]) if len(parts) > 2 else []
        self.operands = outputs + inputs

    def arg(self, token: str) -> Operand | None:
        """The operand ``%N`` names (None for an immediate)."""
        m = re.fullmatch(r"%(\d+)", token.strip())
        if not m:
            return None
        if int(m.group(1)) >= len(self.operands):
            raise Refused(
                f"{self.ptx.split()[0]} naming {token.strip()}, which is no operand of its asm statement", self.at
            )
        return self.operands[int(m.group(1))]

    def value(self, token: str, kind: str) -> str:
        """A source operand as C++: a register (``%N``) or an immediate, as ``kind``."""
        operand = self.arg(token)
        if operand is None:
            return token.strip()
        return f"{kind}{operand.value()}"

    def target(self, token: str, constraint: str) -> str:
        operand = self.arg(token)
        if operand is None or operand.constraint.lstrip("=+&") != constraint:
            raise Refused(f'{self.ptx.split()[0]} with a destination other than a "={constraint}" register', self.at)
        return operand.value()


def _groups(operands: str) -> list[list[str]]:
    """``{%0, %1}, {%2}, %3`` -> [['%0', '%1'], ['%2'], ['%3']]."""
    return [
        [t.strip() for t in (m.group(1) or m.group(2)).split(",")]
        for m in re.finditer(r"\{([^}]*)\}|([^,{}\s][^,{}]*)", operands)
    ]


MMA = {
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32": "mma_tf32",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": "mma_bf16",
}


def _call(s: _Statement) -> str:
    """The C++ statement that does what ``s``'s PTX does, on the emulator."""
    for prefix, what, section in GPU_ONLY:
        if re.search(rf"(?<![\w.]){re.escape(prefix)}\b", s.ptx):
            raise Refused(what, s.at, section)
    if not s.ptx:  # asm volatile("" ::: "memory"): orders the compiler only
        return ";"
    if ";" in s.ptx:
        raise Refused(f"more than one PTX instruction in one asm statement ({s.ptx[:60]})", s.at)
    opcode, _, rest = s.ptx.partition(" ")
    args = _groups(rest)
    if opcode in MMA:
        d, a, b, c = args
        if [len(d), len(a), len(b), len(c)] != [4, 4, 2, 4]:
            raise Refused(f"{opcode} with operands other than {{d0-d3}}, {{a0-a3}}, {{b0, b1}}, {{c0-c3}}", s.at)
        outs = ", ".join(s.target(t, "f") for t in d)
        ins = ", ".join([*(s.value(t, "emu::ptx::b32") for t in a + b), *(s.value(t, "float") for t in c)])
        return f"emu::ptx::{MMA[opcode]}({outs}, {ins}, {SITE});"
    if opcode == "cvt.rna.tf32.f32":
        (d,), (x,) = args
        return f"{s.target(d, 'r')} = emu::tensor_core::cvt_rna_tf32({s.value(x, 'float')});"
    if re.fullmatch(r"cp\.async\.(ca|cg)\.shared(::cta)?\.global(\.L2::\w+)?", opcode):
        dst, src, size, *source_size = (group[0].strip("[] ") for group in args)
        src_size = s.value(source_size[0], "(long long)") if source_size else s.value(size, "(long long)")
        return (f"emu::ptx::cp_async({s.value(dst, '(unsigned)')}, (const void*){s.value(src, '')}, "
                f"{s.value(size, '(long long)')}, {src_size}, {SITE});")  # fmt: skip
    if opcode == "cp.async.commit_group":
        return "__emu_pipeline_commit();"
    if opcode == "cp.async.wait_group":
        return f"__emu_pipeline_wait({s.value(args[0][0], '(size_t)')});"
    if opcode == "cp.async.wait_all":
        return "__emu_pipeline_wait(0);"
    if opcode == "mov.u64" and args[1:] == [["%globaltimer"]]:
        return f"{s.target(args[0][0], 'l')} = __emu_globaltimer();"
    if opcode.startswith("mma"):
        raise Refused(f"the tensor-core instruction {opcode} (it models {' and '.join(MMA)})", s.at)
    raise Refused(f"the PTX instruction {opcode} (inline asm)", s.at)


def lower(text: str, start: int, system: list[tuple[int, int]]) -> str:
    """``text`` with every asm statement of the user's files from ``start`` on replaced by its
    model's call (padded with the statement's newlines, so the lines after it keep their
    numbers); raises Refused. ``system``: the (start, end) offsets of text from system headers
    (whose asm labels, as glibc's, are no statements)."""
    for pattern, what, section in GPU_ONLY_NAMES:
        for m in re.finditer(pattern, text[start:]):
            if not any(a <= start + m.start() < b for a, b in system):
                raise Refused(what, start + m.start(), section)
    pieces, kept = [text[:start]], start
    for m in _ASM.finditer(text, start):
        if m.start() < kept:
            continue
        end = _close(text, m.end())
        if any(a <= m.start() < b for a, b in system):
            continue
        statement = _Statement(text[m.end() : end - 1], m.start())
        try:
            call = _call(statement)
        except (ValueError, IndexError, AttributeError):  # operands in a form _call does not read
            raise Refused(f"the PTX instruction {statement.ptx[:60]} with these operands", m.start()) from None
        stop = end + (text[end : end + 1] == ";")
        pieces += [text[kept : m.start()], call + "\n" * text.count("\n", m.start(), stop)]
        kept = stop
    return "".join(pieces) + text[kept:]
