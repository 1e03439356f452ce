"""Inputs for the tensor-core probe (tests/data/mma_probe.cu) and a runner for it, shared by the GPU
recording (.ci/mma_record.py) and the emulator's tests (test_emulator_mma.py).

Each probe runs one instruction per block (one warp) on a tile of its inputs. The tiles come in
families, each aimed at one part of the arithmetic: plain normal values, a large spread of
exponents, cancellation, ties of the final rounding, subnormals and signed zeros.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("data") / "mma_probe.cu"
FAMILIES = ["normal", "spread", "cancel", "ties", "subnormal", "zeros"]
TILES = 8  # per family
# per probe: (A's shape, B's shape, C's shape) of one tile
SHAPES = {
    "mma_tf32": ((16, 8), (8, 8), (16, 8)),
    "mma_bf16": ((16, 16), (16, 8), (16, 8)),
    "wmma_tf32": ((16, 8), (8, 16), (16, 16)),
    "wmma_bf16": ((16, 16), (16, 16), (16, 16)),
}


def _bits(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _tile(rng, family: str, shapes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One tile's A, B, C as float32 (all 32 bits random: the tensor core's truncation matters)."""
    (m, k), (_, n), _ = shapes
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    if family == "spread":
        a, b, c = (x * np.exp2(rng.integers(-30, 31, x.shape)).astype(np.float32) for x in (a, b, c))
    elif family == "cancel":  # C cancels most of A B
        exact = a.astype(np.float64) @ b.astype(np.float64)
        c = (-exact + 1e-3 * rng.standard_normal(exact.shape)).astype(np.float32)
    elif family == "ties":  # small integers on top of 2**24: sums fall halfway between floats
        a, b = (rng.integers(-4, 5, x.shape).astype(np.float32) for x in (a, b))
        c = (np.float32(2**24) + 2 * rng.integers(-8, 9, c.shape)).astype(np.float32) * rng.choice([-1, 1], c.shape)
    elif family == "subnormal":  # operands near the bottom of float's range, C subnormal
        a = (a * np.float32(2.0**-62)).astype(np.float32)
        b = (b * np.float32(2.0**-62)).astype(np.float32)
        c = (rng.integers(-(2**23), 2**23, c.shape).astype(np.float32) * np.float32(2.0**-149)).astype(np.float32)
        a[0], b[:, 0] = np.float32(2.0**-140), np.float32(2.0**-10)
    elif family == "zeros":  # signed zeros, some whole products zero
        a = np.where(rng.random(a.shape) < 0.5, np.copysign(np.float32(0), rng.standard_normal(a.shape)), a)
        b = np.where(rng.random(b.shape) < 0.5, np.copysign(np.float32(0), rng.standard_normal(b.shape)), b)
        c = np.where(rng.random(c.shape) < 0.5, np.copysign(np.float32(0), rng.standard_normal(c.shape)), c)
        a[:4], c[:4] = -0.0, -0.0  # rows whose D is a sum of zeros only
    return a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits, rounded to nearest even (as __float2bfloat16)."""
    u = _bits(x).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def inputs(seed: int = 19) -> dict[str, np.ndarray]:
    """Every probe's inputs, tiles stacked: ``{probe}_a``, ``_b``, ``_c``, and ``cvt_x``."""
    rng = np.random.default_rng(seed)
    out = {}
    for probe, shapes in SHAPES.items():
        tiles = [_tile(rng, family, shapes) for family in FAMILIES for _ in range(TILES)]
        a, b, c = (np.stack(x) for x in zip(*tiles))
        if probe.endswith("bf16"):
            a, b = bf16_bits(a), bf16_bits(b)
        elif probe == "mma_tf32":
            a, b = _bits(a), _bits(b)
        out |= {f"{probe}_a": a, f"{probe}_b": b, f"{probe}_c": c}
    x = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    x[:512] = (x[:512] & ~np.uint32(0x1FFF)) | np.uint32(0x1000)  # ties of cvt.rna
    x[512:520] = [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF, 0x7F7FF000, 0x00001000, 0x80000000, 0]
    x[520:524] = [0x7F800001, 0xFF801FFF, 0x7F801000, 0x7FC01FFF]  # NaNs; cvt.rna cuts all of 3 payloads
    out["cvt_x"] = x.view(np.float32)
    return out


def run(drv, source_module, given: dict[str, np.ndarray], options: list[str] = ()) -> dict[str, np.ndarray]:
    """Runs every probe on ``given`` through a PyCUDA-like ``drv`` and ``source_module``; returns
    ``{probe}_d`` (float32) and ``cvt_out`` (uint32)."""
    module = source_module(SOURCE.read_text(), no_extern_c=True, options=list(options))
    buffers = []

    def device(array: np.ndarray) -> int:
        buffers.append(drv.mem_alloc(max(array.nbytes, 1)))
        drv.memcpy_htod(buffers[-1], np.ascontiguousarray(array))
        return int(buffers[-1])

    out = {}
    for probe in SHAPES:
        a, b, c = (given[f"{probe}_{x}"] for x in "abc")
        d = np.zeros_like(c)
        d_ptr = device(d)
        kernel = module.get_function(f"probe_{probe}").prepare("PPPP")
        kernel.prepared_call((len(c), 1, 1), (32, 1, 1), d_ptr, device(a), device(b), device(c))
        drv.memcpy_dtoh(d, d_ptr)
        out[f"{probe}_d"] = d
    x = given["cvt_x"]
    got = np.zeros(x.shape, np.uint32)
    got_ptr = device(got)
    module.get_function("probe_cvt_tf32").prepare("PPi").prepared_call(
        ((len(x) + 255) // 256, 1, 1), (256, 1, 1), got_ptr, device(x), np.int32(len(x))
    )
    drv.memcpy_dtoh(got, got_ptr)
    out["cvt_out"] = got
    return out


def family_of_tile(index: int) -> str:
    return FAMILIES[index // TILES]
