"""The transform kernels as Triton tile kernels.

A Triton program owns a tile of ``BLOCK`` elements: it loads them with one
masked vector load, computes on the whole tile and stores it. There is no
thread index and no per-element control flow; a condition becomes a mask or a
``tl.where`` (a select) over the tile. Importing this module imports Triton;
``availability.triton()`` says first whether that can work here.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .cases import MAX_FIB_N

STREAM_BLOCK = 1024
HEAVY_BLOCK = 256


@triton.jit
def _tile(n, BLOCK: tl.constexpr):
    """The offsets of this program's tile and the mask of those inside the array."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < n


@triton.jit
def copy_kernel(out_ptr, a_ptr, b_ptr, c_ptr, scalar, n, BLOCK: tl.constexpr):
    offs, mask = _tile(n, BLOCK)
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_kernel(out_ptr, a_ptr, b_ptr, c_ptr, scalar, n, BLOCK: tl.constexpr):
    offs, mask = _tile(n, BLOCK)
    a = tl.load(a_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.cast(scalar, a.dtype) * a, mask=mask)


@triton.jit
def add_kernel(out_ptr, a_ptr, b_ptr, c_ptr, scalar, n, BLOCK: tl.constexpr):
    offs, mask = _tile(n, BLOCK)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b, mask=mask)


@triton.jit
def triad_kernel(out_ptr, a_ptr, b_ptr, c_ptr, scalar, n, BLOCK: tl.constexpr):
    offs, mask = _tile(n, BLOCK)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + tl.cast(scalar, a.dtype) * b, mask=mask)


@triton.jit
def nstream_kernel(out_ptr, a_ptr, b_ptr, c_ptr, scalar, n, BLOCK: tl.constexpr):
    offs, mask = _tile(n, BLOCK)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    c = tl.load(c_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b + tl.cast(scalar, a.dtype) * c, mask=mask)


STREAM_KERNELS = {
    "copy": copy_kernel,
    "scale": scale_kernel,
    "add": add_kernel,
    "triad": triad_kernel,
    "nstream": nstream_kernel,
}


@triton.jit
def fib_unrolled_kernel(out_ptr, in_ptr, n, MAX_N: tl.constexpr, BLOCK: tl.constexpr):
    """The source's tile fibonacci: every element runs all MAX_N steps; selects keep the right ones."""
    offs, mask = _tile(n, BLOCK)
    k = tl.load(in_ptr + offs, mask=mask, other=0)
    t1 = tl.zeros_like(k)
    t2 = t1 + 1
    for i in tl.static_range(3, MAX_N + 1):  # unrolled at compile time
        nxt = t1 + t2
        more = k >= i
        t1 = tl.where(more, t2, t1)
        t2 = tl.where(more, nxt, t2)
    r = tl.where(k < 2, 0, t2)
    r = tl.where(k == 2, 1, r)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def fib_tilemax_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    """The same with a loop that stops at the tile's largest input: a data-dependent trip count per tile."""
    offs, mask = _tile(n, BLOCK)
    k = tl.load(in_ptr + offs, mask=mask, other=0)
    t1 = tl.zeros_like(k)
    t2 = t1 + 1
    for i in range(3, tl.max(k, axis=0) + 1):
        nxt = t1 + t2
        more = k >= i
        t1 = tl.where(more, t2, t1)
        t2 = tl.where(more, nxt, t2)
    r = tl.where(k < 2, 0, t2)
    r = tl.where(k == 2, 1, r)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def heavy_kernel(out_ptr, in_ptr, n, N: tl.constexpr, BLOCK: tl.constexpr):
    """heavy_op with the per-element array as a [BLOCK, N] tile (a tile cannot be indexed per element)."""
    offs, mask = _tile(n, BLOCK)
    v = tl.load(in_ptr + offs, mask=mask, other=0)
    cols = tl.arange(0, N)[None, :]
    reg = tl.where(cols == 0, v[:, None], 0)
    for i in tl.static_range(1, N):  # reg[i] = reg[i-1]^2 + 1, column by column
        v = v * v + 1
        reg = tl.where(cols == i, v[:, None], reg)
    reg = (reg * reg) % 19
    rev = tl.flip(reg, 1)  # rev[:, i] = reg[:, N - 1 - i]
    # The source's in-place loop reg[i] = reg[N-1-i] * reg[i]: the first half reads
    # untouched values, the second half reads the products the first half wrote.
    reg = tl.where(cols < N // 2, rev * reg, rev * reg * reg)
    tl.store(out_ptr + offs, tl.sum(reg, axis=1), mask=mask)


def stream(op: str, out, inputs: list, scalar, block: int = STREAM_BLOCK, num_warps: int = 4) -> None:
    """Launch a stream on TileArrays (or HostArrays under TRITON_INTERPRET=1)."""
    args = list(inputs) + [inputs[0]] * (3 - len(inputs))  # unused operands: any valid pointer
    grid = (triton.cdiv(_size(out), block),)
    STREAM_KERNELS[op][grid](out, *args, scalar, _size(out), BLOCK=block, num_warps=num_warps)


def fib(out, inp, variant: str = "unrolled", block: int = STREAM_BLOCK) -> None:
    grid = (triton.cdiv(_size(out), block),)
    if variant == "unrolled":
        fib_unrolled_kernel[grid](out, inp, _size(out), MAX_N=MAX_FIB_N, BLOCK=block)
    elif variant == "tilemax":
        fib_tilemax_kernel[grid](out, inp, _size(out), BLOCK=block)
    else:
        raise ValueError(f"no fib variant {variant!r}: 'unrolled' or 'tilemax'")


def heavy(out, inp, n_values: int, block: int = HEAVY_BLOCK, num_warps: int = 4) -> None:
    grid = (triton.cdiv(_size(out), block),)
    heavy_kernel[grid](out, inp, _size(out), N=n_values, BLOCK=block, num_warps=num_warps)


def _size(array) -> int:
    """Element count of a TileArray (``size`` attribute) or a HostArray (numpy ``values``)."""
    values = getattr(array, "values", None)
    return int(values.size) if values is not None else int(array.size)
