"""The hidden checks of Exercise 19.2: who holds what in one ``mma.sync`` TF32 tile (numpy, no GPU).

``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` is issued by a whole warp: A (16 x 8),
B (8 x 8) and C, D (16 x 8) are spread over the registers of its 32 lanes, four of A, two of B
and four of C (and of D, laid out as C) per lane. Which element each register holds is fixed
by the PTX ISA ("Matrix Fragments for mma.m16n8k8", the ``.tf32`` operands and the ``.f32``
accumulators); ``kernels/mma_async.cu`` feeds the instruction by this layout and passes its
checks on the H200. With groupID g = lane / 4 and threadID_in_group t = lane % 4:

    A:    a0 (g, t)    a1 (g + 8, t)     a2 (g, t + 4)    a3 (g + 8, t + 4)
    B:    b0 (t, g)    b1 (t + 4, g)
    C, D: c0 (g, 2t)   c1 (g, 2t + 1)    c2 (g + 8, 2t)   c3 (g + 8, 2t + 1)

The check runs the warp's product in numpy: each lane's registers are filled from A, B and C
by the student's layout, the "tensor core" reads them by the instruction's layout and computes
D in float64, and D's registers are read back by the student's layout, against float64
A @ B + C. A layout that differs from the instruction's fails even when that product comes out
right (the same permutation of k in A and B cancels), naming the first wrong lane and register.
"""

from __future__ import annotations

import numpy as np

from ..numerics import tf32_reference

SHAPES = {"a": (16, 8), "b": (8, 8), "c": (16, 8)}  # rows x columns of A, B and C (= D)
REGISTERS = {"a": 4, "b": 2, "c": 4}  # registers per lane
NAMES = {"a": "A", "b": "B", "c": "C/D"}


def ptx_layout(operand: str, lane: int, register: int) -> tuple[int, int]:
    """(row, column) of the element that ``register`` of ``lane`` holds, by the PTX ISA."""
    g, t = divmod(lane, 4)
    if operand == "a":
        return g + 8 * (register & 1), t + 4 * (register >> 1)
    if operand == "b":
        return t + 4 * register, g
    return g + 8 * (register >> 1), 2 * t + (register & 1)


def slots():
    """Every (operand, lane, register) of one instruction, in the order a check reports them."""
    return [(op, lane, reg) for op in "abc" for lane in range(32) for reg in range(REGISTERS[op])]


def warp_mma(layout, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A B + C as a warp computes it when ``layout`` fills its registers and reads D back:
    the tensor core reads and writes the registers by the instruction's layout. Elements of D
    that ``layout`` never reads back are NaN."""
    regs = {op: {} for op in "abc"}
    for (op, lane, reg), matrix in zip(slots(), [a] * 128 + [b] * 64 + [c] * 128):
        regs[op][lane, reg] = matrix[layout(op, lane, reg)]
    seen = {op: np.zeros(SHAPES[op]) for op in "abc"}  # the operands as the tensor core sees them
    for op, lane, reg in slots():
        seen[op][ptx_layout(op, lane, reg)] = regs[op][lane, reg]
    d = seen["a"] @ seen["b"] + seen["c"]
    out = np.full(SHAPES["c"], np.nan)
    for lane in range(32):
        for reg in range(REGISTERS["c"]):
            out[layout("c", lane, reg)] = d[ptx_layout("c", lane, reg)]
    return out


def _read_layout(fragment_coords) -> dict:
    """The student's layout for every slot, as ints; fails naming the first slot that is not a pair of ints."""
    from .verdict import WRONG_RESULT, call, fail

    table = {}
    for op, lane, reg in slots():
        got = call(f"fragment_coords({op!r}, {lane}, {reg})", fragment_coords, op, lane, reg)
        try:
            row, col = (int(v) for v in got)
            exact = all(float(v) == int(v) for v in got)
        except (TypeError, ValueError):
            exact = False
        if not exact:
            fail(WRONG_RESULT, f"{_where(op, lane, reg)}: return (row, column) as two integers, got {got!r}")
        table[op, lane, reg] = (row, col)
    return table


def _where(op: str, lane: int, reg: int) -> str:
    return f"{NAMES[op]}, lane {lane}, register {op}{reg}"


def _inside(op: str, rc: tuple[int, int]) -> bool:
    return 0 <= rc[0] < SHAPES[op][0] and 0 <= rc[1] < SHAPES[op][1]


def _doubly_held(table: dict) -> list[str]:
    """Elements that two slots of the student's layout claim (so that others are held by none)."""
    owner, clashes = {}, []
    for (op, lane, reg), rc in table.items():
        if (op, rc) in owner:
            first = owner[op, rc]
            clashes.append(f"{NAMES[op]}{rc} is held by lane {first[0]} {op}{first[1]} and by lane {lane} {op}{reg}")
        owner[op, rc] = (lane, reg)
    return clashes[:3]


def check_mma_fragments(fragment_coords, source: str = "") -> list[str]:
    from .verdict import WRONG_RESULT, expect_value_error, fail, notebook_hint, source_of

    notebook_hint(
        fragment_coords,
        source or source_of(fragment_coords),
        {
            r"minitorch_cuda|\bmt\s*\.|importlib|__import__": "derive the layout from the instruction's rules: "
            "the course's own copies of it (the grader, the chapter's diagram, mma_async.cu) are the answer key",
        },
    )
    table = _read_layout(fragment_coords)
    wrong = [s for s in slots() if table[s] != ptx_layout(*s)]
    if wrong:
        first = (
            f"{_where(*wrong[0])}: yours {table[wrong[0]]}, the instruction's {ptx_layout(*wrong[0])} "
            "(the first register that differs from the instruction's layout)"
        )
        outside = [s for s in slots() if not _inside(s[0], table[s])]
        if outside:
            op = outside[0][0]
            fail(
                WRONG_RESULT,
                f"{first}; your layout puts {_where(*outside[0])} at {table[outside[0]]}, outside the "
                f"{SHAPES[op][0]} x {SHAPES[op][1]} {NAMES[op]}",
            )
    rng = np.random.default_rng()
    a, b, c = (tf32_reference(rng.standard_normal(SHAPES[op]).astype(np.float32)).astype(np.float64) for op in "abc")
    got = warp_mma(lambda op, lane, reg: table[op, lane, reg], a, b, c)
    want = a @ b + c
    bad = ~np.isclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=False)
    if wrong:
        details = _doubly_held(table)
        if bad.any():
            shown = [
                f"D{tuple(ix.tolist())}: got {got[tuple(ix)]:.6g}, want {want[tuple(ix)]:.6g}"
                for ix in np.argwhere(bad)[:3]
            ]
            fail(
                WRONG_RESULT,
                f"{first}; the warp's mma with your layout gives a wrong D ({int(bad.sum())} of 128)",
                details + shown,
            )
        fail(
            WRONG_RESULT,
            f"{first}; your layout gives the right D here (the same permutation of k in A and B cancels), but "
            "the instruction's layout is fixed: data loaded by yours would not match any other code's",
            details,
        )
    done = [
        "all 320 registers (A a0-a3, B b0-b1, C/D c0-c3 of 32 lanes) hold the PTX ISA's elements",
        "a warp-level mma run from per-lane registers filled and read back by your layout equals float64 A @ B + C",
    ]
    for args in (("a", 32, 0), ("a", -1, 0), ("b", 0, 2), ("c", 0, 4), ("x", 0, 0)):
        expect_value_error(f"fragment_coords{args}", fragment_coords, *args)
    done.append("a lane outside 0..31, a register the operand does not have, or another operand raise ValueError")
    return done
