"""The transform kernels in cuTile Python (``cuda.tile``), NVIDIA's tile model.

A cuTile kernel loads whole tiles by *tile index* (``ct.load(a, index=(b,),
shape=(TILE,))``), computes on them and stores them back; the compiler maps
the tile onto threads. The H200 cannot run these (``availability.cutile()``
says why: the toolkit and the compute capability); the chapter shows them and
the benchmark measures them wherever cuTile runs. Importing this module imports
cuda.tile.
"""

from __future__ import annotations

import cuda.tile as ct

from .cases import MAX_FIB_N

TILE = 1024
HEAVY_TILE = 256


@ct.kernel
def copy_kernel(out, a, b, c, scalar, tile: ct.Constant[int]):
    i = ct.bid(0)
    ct.store(out, index=(i,), tile=ct.load(a, index=(i,), shape=(tile,)))


@ct.kernel
def scale_kernel(out, a, b, c, scalar, tile: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(tile,))
    ct.store(out, index=(i,), tile=(scalar * x).astype(x.dtype))


@ct.kernel
def add_kernel(out, a, b, c, scalar, tile: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(tile,))
    y = ct.load(b, index=(i,), shape=(tile,))
    ct.store(out, index=(i,), tile=x + y)


@ct.kernel
def triad_kernel(out, a, b, c, scalar, tile: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(tile,))
    y = ct.load(b, index=(i,), shape=(tile,))
    ct.store(out, index=(i,), tile=(x + scalar * y).astype(x.dtype))


@ct.kernel
def nstream_kernel(out, a, b, c, scalar, tile: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(tile,))
    y = ct.load(b, index=(i,), shape=(tile,))
    z = ct.load(c, index=(i,), shape=(tile,))
    ct.store(out, index=(i,), tile=(x + y + scalar * z).astype(x.dtype))


STREAM_KERNELS = {
    "copy": copy_kernel,
    "scale": scale_kernel,
    "add": add_kernel,
    "triad": triad_kernel,
    "nstream": nstream_kernel,
}


@ct.kernel
def fib_kernel(out, inp, tile: ct.Constant[int], max_n: ct.Constant[int]):
    """The source's fib_op in cuTile Python: all max_n steps for every element, with selects."""
    i = ct.bid(0)
    k = ct.load(inp, index=(i,), shape=(tile,))
    t1 = k - k
    t2 = t1 + 1
    for j in range(3, max_n + 1):
        nxt = t1 + t2
        more = k >= j
        t1 = ct.where(more, t2, t1)
        t2 = ct.where(more, nxt, t2)
    r = ct.where(k < 2, t1 - t1, t2)
    r = ct.where(k == 2, r - r + 1, r)
    ct.store(out, index=(i,), tile=r)


def stream(op: str, out, inputs: list, scalar, stream_handle=0, tile: int = TILE) -> None:
    """Launch on arrays that carry ``__cuda_array_interface__`` (our TileArray, CuPy)."""
    args = list(inputs) + [inputs[0]] * (3 - len(inputs))
    grid = (ct.cdiv(out.size, tile), 1, 1)
    ct.launch(stream_handle, grid, STREAM_KERNELS[op], (out, *args, scalar, tile))


def fib(out, inp, stream_handle=0, tile: int = TILE) -> None:
    grid = (ct.cdiv(out.size, tile), 1, 1)
    ct.launch(stream_handle, grid, fib_kernel, (out, inp, tile, MAX_FIB_N))
