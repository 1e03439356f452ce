"""Launch helpers shared by the CUDA ops: grids, block sizes, stage variants."""

from __future__ import annotations

from .. import stages
from . import registry
from .kernel_table import SPECS
from .runtime import launch, multiprocessors

BLOCK = 256  # threads per block for one-thread-per-element kernels


def _grid(n: int) -> tuple[int, int, int]:
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _elementwise(name: str, n: int, *args, shapes=()) -> None:
    launch(registry.get(name), _grid(n), (BLOCK, 1, 1), *args, shapes=shapes)


def _elementwise_vec(name: str, n: int, pointers: tuple[int, ...], *args, shapes=()) -> None:
    """Stage 9 on: the 16-byte vectorized, grid-stride variant where every pointer is
    16-byte aligned (fresh buffers are; row slices of odd widths may not be)."""
    vec = f"{name}_vec4"
    if stages.vectorized_kernels() and vec in SPECS and all(p % 16 == 0 for p in pointers):
        blocks = max(1, min(-(-(n // 4) // BLOCK), 8 * multiprocessors()))
        launch(registry.get(vec), (blocks, 1, 1), (BLOCK, 1, 1), *args, shapes=shapes)
    else:
        _elementwise(name, n, *args, shapes=shapes)


def _reduce_block(length: int) -> int:
    """A power of two in 64..1024: block-reduction kernels need one."""
    return min(1024, max(64, 1 << (max(length, 1) - 1).bit_length()))


def _variant(base: str) -> str:
    return f"{base}_shuffle" if stages.warp_shuffle() else f"{base}_volatile"


class _NullPointer:
    ptr = 0  # kernels skip an optional operand (a bias, partial sums) given a null pointer


NULL_POINTER = _NullPointer()
