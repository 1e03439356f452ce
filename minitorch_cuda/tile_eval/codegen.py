"""Evidence from generated code: what PTX and SASS say about a kernel.

The source's two outliers show up in the generated code: a data-dependent
loop flattened into selects (``selp`` in PTX, ``SEL`` in SASS) and a
per-thread array that leaves registers (``ld.local``/``st.local``, ``LDL``/
``STL``, or a call to the device ``malloc``). This module counts those
patterns and keeps a few example lines, so the JSON carries the evidence.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

PTX_PATTERNS = {
    "ld.local": r"\bld\.local\b",
    "st.local": r"\bst\.local\b",
    "selp": r"\bselp\.",
    "predicated": r"^\s*@!?%p\d+",
    "branches": r"\bbra(\.uni)?\b",
    "malloc": r"\bmalloc\b",
    "local_decl": r"\.local\s+\.align",
}
SASS_PATTERNS = {
    "LDL": r"\bLDL(\.\w+)*\b",
    "STL": r"\bSTL(\.\w+)*\b",
    "SEL": r"\bI?SEL\b|\bSEL\.",
    "predicated": r"/\*[0-9a-f]{4,}\*/\s+@!?P\d",  # addresses grow past 4 digits after 4096 instructions
    "BRA": r"\bBRA\b",
    "CALL": r"\bCALL\.",
    "malloc": r"malloc",
}


def count(text: str, patterns: dict[str, str]) -> dict[str, int]:
    return {name: len(re.findall(p, text, re.MULTILINE)) for name, p in patterns.items()}


def examples(text: str, patterns: dict[str, str], keys: tuple[str, ...], limit: int = 6) -> list[str]:
    """The first few lines that match any of ``keys``: the evidence a reader can look at."""
    wanted = [re.compile(patterns[k], re.MULTILINE) for k in keys]
    out = [line.strip() for line in text.splitlines() if any(w.search(line) for w in wanted)]
    return out[:limit]


def instruction_count(sass: str) -> int:
    """SASS instructions: lines with the /*address*/ prefix."""
    return len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", sass, re.MULTILINE))


def sass_of(cubin: bytes) -> str | None:
    """Disassemble a cubin with cuobjdump (or nvdisasm); None where neither is installed."""
    tool = shutil.which("cuobjdump") or shutil.which("nvdisasm")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        args = [tool, "-sass", str(path)] if tool.endswith("cuobjdump") else [tool, str(path)]
        done = subprocess.run(args, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def evidence(ptx: str | None, cubin: bytes | None) -> dict:
    """Counts and examples from the PTX and the SASS of one kernel, plus the cubin size."""
    out: dict = {"cubin_bytes": len(cubin) if cubin else None}
    if ptx:
        out["ptx_lines"] = ptx.count("\n")
        out["ptx"] = count(ptx, PTX_PATTERNS)
        out["ptx_examples"] = examples(ptx, PTX_PATTERNS, ("ld.local", "st.local", "selp", "malloc"))
    sass = sass_of(cubin) if cubin else None
    if sass:
        out["sass_instructions"] = instruction_count(sass)
        out["sass"] = count(sass, SASS_PATTERNS)
        out["sass_examples"] = examples(sass, SASS_PATTERNS, ("LDL", "STL", "SEL", "malloc"))
    return out
