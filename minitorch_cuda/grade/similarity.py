"""How alike two kernels are, for the instructor's similarity report (``similarity.csv``).

As MOSS does (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for
document fingerprinting", SIGMOD 2003): a kernel's CUDA C is cut into tokens with
comments dropped, and every identifier, number and string becomes one placeholder
(keywords, operators and CUDA's built-ins stay), so renaming, re-spacing and
re-commenting change nothing. Each run of ``K`` tokens is hashed, and of every
``WINDOW`` consecutive hashes the smallest is kept: two texts sharing a run of at
least ``K + WINDOW - 1`` tokens are sure to share a fingerprint. The score of a
pair is the share of the smaller kernel's fingerprints found in the other.

Fingerprints of the exercise's starter code (what every student was given) are
removed first, and a kernel with fewer than ``MIN_FINGERPRINTS`` left is too short
to say anything about (a ReLU is the same ReLU everywhere). The report flags; it
never fails anyone: an instructor reads the two kernels side by side.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

K = 12  # tokens per hashed run: shorter runs are common to any two CUDA kernels
WINDOW = 8  # hashes per winnowing window: a shared run of K + WINDOW - 1 = 19 tokens is always seen
MIN_FINGERPRINTS = 8  # fewer, once the starter code is removed: too short to flag
FLAGGED = 0.8  # score from which a pair is flagged
REPORTED = 0.5  # score from which a pair is written to similarity.csv at all

KERNELS = Path(__file__).resolve().parents[1] / "kernels"

_TOKEN = re.compile(
    r"""
      (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
    | (?P<string>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
    | (?P<number>(?:\d|\.\d)(?:[\w.']|[eEpP][+-])*)
    | (?P<word>[A-Za-z_]\w*)
    | (?P<punct>->|\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^!=<>]=?|::|[^\s\w])
    """,
    re.S | re.X,
)

# words that keep their spelling: C and CUDA keywords, types and built-ins (what a rename cannot change)
KEPT = set(
    """
    auto break case char const constexpr continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while bool true false template typename class namespace using nullptr
    __global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ __launch_bounds__
    threadIdx blockIdx blockDim gridDim warpSize x y z size_t half float2 float4 int2 int4 dim3
    __syncthreads __syncwarp __shfl_sync __shfl_down_sync __shfl_up_sync __shfl_xor_sync __ballot_sync
    atomicAdd atomicCAS atomicMax atomicMin atomicExch __fdividef __expf expf logf sqrtf rsqrtf fmaxf fminf
    fabsf max min include define pragma unroll
    """.split()
)


def tokens(source: str) -> list[str]:
    """The normalised tokens of CUDA C ``source``: comments dropped, identifiers ``I``, numbers ``N``,
    string and character literals ``S``; keywords, CUDA's built-ins and operators as written."""
    out = []
    for match in _TOKEN.finditer(source):
        kind, text = match.lastgroup, match.group()
        if kind == "comment":
            continue
        if kind == "string":
            out.append("S")
        elif kind == "number":
            out.append("N")
        elif kind == "word":
            out.append(text if text in KEPT else "I")
        else:
            out.append(text)
    return out


def _hash(run: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(run).encode(), digest_size=8).digest(), "little")


def fingerprints(source: str, k: int = K, window: int = WINDOW) -> frozenset[int]:
    """The winnowed fingerprints of ``source``: of each ``window`` consecutive ``k``-token hashes, the
    smallest (kept as a set of hashes: where in the text they lie does not matter for the score)."""
    toks = tokens(source)
    hashes = [_hash(toks[i : i + k]) for i in range(len(toks) - k + 1)]
    if len(hashes) <= window:
        return frozenset(hashes)
    return frozenset(min(hashes[start : start + window]) for start in range(len(hashes) - window + 1))


def score(a: frozenset[int], b: frozenset[int]) -> float:
    """The share of the smaller set found in the other (1.0: one is contained in the other)."""
    smaller = min(len(a), len(b))
    return len(a & b) / smaller if smaller else 0.0


def global_functions(source: str) -> dict[str, str]:
    """Each ``__global__`` function of ``source`` by name: its text from ``__global__`` to the brace
    that closes its body (comments and strings skipped when counting braces)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"__global__", source):
        start, depth, body = match.start(), 0, False
        name = None
        for tok in _TOKEN.finditer(source, match.end()):
            text, kind = tok.group(), tok.lastgroup
            if kind in ("comment", "string"):
                continue
            if kind == "word" and not body and name is None and source[tok.end() :].lstrip().startswith("("):
                name = text
            if text == ";" and not body:
                break  # a declaration, no body
            if text == "{":
                depth, body = depth + 1, True
            elif text == "}":
                depth -= 1
                if body and depth == 0:
                    if name:  # one defined through a macro may repeat its name: numbered
                        key, n = name, 2
                        while key in found:
                            key, n = f"{name}#{n}", n + 1
                        found[key] = source[start : tok.end()]
                    break
    return found


@dataclasses.dataclass(frozen=True)
class Match:
    exercise: str
    student: str
    other: str  # another student, or "built-in FILE.cu:FUNCTION"
    score: float
    shared: int  # fingerprints in common

    @property
    def flagged(self) -> bool:
        return self.score >= FLAGGED


def builtin_kernels(folder: Path = KERNELS) -> dict[str, frozenset[int]]:
    """The course's own kernels, per ``__global__`` function: ``"built-in FILE.cu:NAME"`` -> fingerprints."""
    out = {}
    for path in sorted(folder.glob("*.cu")):
        for name, text in global_functions(path.read_text(errors="replace")).items():
            out[f"built-in {path.name}:{name}"] = fingerprints(text)
    return out


def compare(
    exercise: str,
    submissions: dict[str, str],
    builtins: dict[str, frozenset[int]],
    starter: str = "",
) -> list[Match]:
    """Every match of score ``REPORTED`` or more for one exercise: each student's kernel (``submissions``:
    student -> CUDA source) against the built-in kernels (per ``__global__`` function of the submission)
    and against every other student's, the ``starter`` code's fingerprints removed from all."""
    base = fingerprints(starter) if starter else frozenset()
    whole: dict[str, frozenset[int]] = {}
    parts: dict[str, list[frozenset[int]]] = {}
    for student, source in submissions.items():
        whole[student] = fingerprints(source) - base
        parts[student] = [fingerprints(f) - base for f in global_functions(source).values()] or [whole[student]]
    course = {name: theirs - base for name, theirs in builtins.items()}
    course = {name: theirs for name, theirs in course.items() if len(theirs) >= MIN_FINGERPRINTS}
    matches = []
    for student in sorted(submissions):
        best: dict[str, tuple[float, int]] = {}
        for part in parts[student]:
            if len(part) < MIN_FINGERPRINTS:
                continue
            for name, theirs in course.items():
                found = (score(part, theirs), len(part & theirs))
                best[name] = max(best.get(name, found), found)
        matches += [Match(exercise, student, name, s, n) for name, (s, n) in best.items() if s >= REPORTED]
    ordered = sorted(submissions)
    for i, a in enumerate(ordered):
        if len(whole[a]) < MIN_FINGERPRINTS:
            continue
        for b in ordered[i + 1 :]:
            if len(whole[b]) < MIN_FINGERPRINTS:
                continue
            s = score(whole[a], whole[b])
            if s >= REPORTED:
                matches.append(Match(exercise, a, b, s, len(whole[a] & whole[b])))
    return sorted(matches, key=lambda m: (-m.score, m.exercise, m.student, m.other))


def rows(matches: Iterable[Match]) -> list[list[str]]:
    """similarity.csv: a header, then one row per match, the highest scores first."""
    out = [["exercise", "student", "matches", "score", "shared_fingerprints", "flagged"]]
    for m in sorted(matches, key=lambda m: (-m.score, m.exercise, m.student, m.other)):
        out.append([m.exercise, m.student, m.other, f"{m.score:.2f}", str(m.shared), "yes" if m.flagged else ""])
    return out
