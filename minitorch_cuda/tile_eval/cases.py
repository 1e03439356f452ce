"""The benchmark set: what is computed, on which types, with which inputs.

It follows the transform benchmarks of CUB that the tile evaluation used
(source: the CCCL issue "Functional/Non-Functional C++ Tile Evaluation"):
the five BabelStream-like streams, a data-dependent loop (fibonacci) and a
"heavy" operation that keeps an array of ``N`` values per element. Everything
here is numpy and runs anywhere; it is the reference the kernels are held to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

SIZES_LOG2 = (16, 20, 24, 28)
MAX_FIB_N = 42  # inputs of the fibonacci case are drawn from [0, MAX_FIB_N]
HEAVY_NS = (8, 16, 32, 64)
SCALAR_FLOAT = 0.375  # exact in fp16, bf16, fp32 and fp64, so every model starts from the same scalar
SCALAR_INT = 3


@dataclasses.dataclass(frozen=True)
class DType:
    name: str  # our short name, used in kernel names: triad_fp16
    itemsize: int
    ctype: str  # the CUDA C type
    triton: str  # what Triton reads from str(tensor.dtype)
    typestr: str | None  # CUDA array interface type string (None: numpy has none)
    is_float: bool


DTYPES: dict[str, DType] = {
    d.name: d
    for d in [
        DType("fp16", 2, "__half", "float16", "<f2", True),
        DType("bf16", 2, "__nv_bfloat16", "bfloat16", None, True),
        DType("fp32", 4, "float", "float32", "<f4", True),
        DType("fp64", 8, "double", "float64", "<f8", True),
        DType("int8", 1, "signed char", "int8", "|i1", False),
        DType("int64", 8, "long long", "int64", "<i8", False),
        # not in the stream sweep: the inputs of the fibonacci and heavy cases
        DType("uint32", 4, "unsigned int", "uint32", "<u4", False),
    ]
}
STREAM_DTYPES = ("fp16", "bf16", "fp32", "fp64", "int8", "int64")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy type for our dtype name; bf16 needs ``ml_dtypes`` (the book extra)."""
    if name == "bf16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError(f"bf16 on the host needs ml_dtypes: pip install ml_dtypes ({exc})") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(
        {
            "fp16": np.float16,
            "fp32": np.float32,
            "fp64": np.float64,
            "int8": np.int8,
            "int64": np.int64,
            "uint32": np.uint32,
        }[name]
    )


def scalar_for(dtype: str) -> float | int:
    return SCALAR_FLOAT if DTYPES[dtype].is_float else SCALAR_INT


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    inputs: int  # arrays read
    formula: str  # as the chapter prints it
    reference: Callable  # numpy, on arrays of the op's own type
    in_place: bool = False  # nstream updates its first input

    @property
    def bytes_per_element(self) -> int:
        """Elements moved per output element: reads plus one write."""
        return self.inputs + 1


def _typed(f):
    """Evaluate f with the scalar in the arrays' own type, as the kernels do."""

    def run(s, *arrays):
        return f(arrays[0].dtype.type(s), *arrays)

    return run


STREAMS: dict[str, Op] = {
    op.name: op
    for op in [
        Op("copy", 1, "out = a", lambda s, a: a.copy()),
        Op("scale", 1, "out = s * a", _typed(lambda s, a: s * a)),
        Op("add", 2, "out = a + b", lambda s, a, b: a + b),
        Op("triad", 2, "out = a + s * b", _typed(lambda s, a, b: a + s * b)),
        Op("nstream", 3, "a = a + b + s * c", _typed(lambda s, a, b, c: a + b + s * c), in_place=True),
    ]
}


def stream_inputs(op: str, dtype: str, n: int, seed: int = 0, bits: bool = False) -> list[np.ndarray]:
    """Inputs of a stream: small values, so that integer types do not overflow by much.

    bf16 values are float32 values cut to bf16 precision, so they convert exactly;
    with ``bits=True`` they come as their uint16 bit patterns (no ml_dtypes needed:
    this is what goes to the GPU and is compared bit for bit).
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(STREAMS[op].inputs):
        if not DTYPES[dtype].is_float:
            out.append(rng.integers(-8, 8, n, dtype=np.int8).astype(numpy_dtype(dtype)))
            continue
        x = rng.random(n, dtype=np.float32) * 2 - 1
        if dtype == "bf16":
            top = (x.view(np.uint32) >> 16).astype(np.uint16)
            out.append(top if bits else (top.astype(np.uint32) << 16).view(np.float32).astype(numpy_dtype("bf16")))
        else:
            out.append(x.astype(numpy_dtype(dtype)))
    return out


def host_dtype(dtype: str) -> np.dtype:
    """The numpy type that holds ``dtype``'s bytes on the host without ml_dtypes."""
    return np.dtype(np.uint16) if dtype == "bf16" else numpy_dtype(dtype)


# --- fibonacci: a loop whose trip count depends on the data ------------------------


def fib_scalar(n: int) -> int:
    """The CUB benchmark's function, element by element (as the CUDA C kernel runs it)."""
    t1, t2 = 0, 1
    if n < 1 or n == 1:
        return 0
    if n == 2:
        return 1
    for _ in range(3, n + 1):
        t1, t2 = t2, t1 + t2
    return t2


FIB_TABLE = np.array([fib_scalar(k) for k in range(MAX_FIB_N + 1)], dtype=np.int64)


def fib_reference(n: np.ndarray) -> np.ndarray:
    return FIB_TABLE[np.asarray(n, dtype=np.int64)]


def fib_inputs(size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, MAX_FIB_N + 1, size, dtype=np.int64)


# --- heavy: N values per element that the source wants in registers ----------------


def heavy_reference(data: np.ndarray, n_values: int) -> np.ndarray:
    """The source's heavy_op on uint32, literally: four loops over a per-element array."""
    data = np.asarray(data, dtype=np.uint32)
    reg = np.empty((data.size, n_values), dtype=np.uint32)
    reg[:, 0] = data
    with np.errstate(over="ignore"):
        for i in range(1, n_values):
            reg[:, i] = reg[:, i - 1] * reg[:, i - 1] + np.uint32(1)
        reg = (reg * reg) % np.uint32(19)
        for i in range(n_values):  # in place: the second half reads values the first half wrote
            reg[:, i] = reg[:, n_values - i - 1] * reg[:, i]
        return reg.sum(axis=1, dtype=np.uint32)


def heavy_inputs(size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, size, dtype=np.uint32)


CASE_NAMES = (*STREAMS, "fib", *(f"heavy{n}" for n in HEAVY_NS))


def throughput_cases(sizes_log2=SIZES_LOG2, names=CASE_NAMES) -> list[dict]:
    """Every (case, dtype, size) the benchmark measures, in order; ``names`` picks cases."""
    unknown = set(names) - set(CASE_NAMES)
    if unknown:
        raise ValueError(f"unknown case(s) {sorted(unknown)}; the cases are {', '.join(CASE_NAMES)}")
    cases = [  # ordered so that consecutive streams share their inputs
        {"case": op, "dtype": dt, "log2": k} for dt in STREAM_DTYPES for k in sizes_log2 for op in STREAMS
    ]
    cases += [{"case": "fib", "dtype": "int64", "log2": k} for k in sizes_log2]
    cases += [{"case": f"heavy{n}", "dtype": "uint32", "log2": k} for n in HEAVY_NS for k in sizes_log2]
    return [c for c in cases if c["case"] in names]


def compiled_kernels(names=CASE_NAMES) -> list[str]:
    """The kernels whose compile time and code are measured: the triad, and the outliers among ``names``."""
    return ["triad_fp32"] + [n for n in ("fib", *(f"heavy_{k}" for k in HEAVY_NS)) if n.replace("_", "") in names]
