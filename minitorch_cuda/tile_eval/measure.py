"""Throughput and correctness of every model on every case (needs a GPU).

For each (case, dtype, size): the inputs are uploaded once, copied into enough
buffer sets to defeat L2, the CUDA C kernel runs first on set 0 and its output
is the reference every other model is compared with, bit for bit or in ULPs;
then each model is timed over the rotating sets. GElem/s counts output
elements; the fraction of copy bandwidth compares the bytes a kernel moves
with a device-to-device cuMemcpy of the same array size, measured in this run.
"""

from __future__ import annotations

import numpy as np

from . import cases, compare, timing
from .interop import TileArray

CHECKED_PREFIX = 1 << 22  # elements read back and compared per model (the rest behaves the same)
NUMPY_PREFIX = 1 << 16  # elements held to the numpy reference (heavy64 in numpy is slow)


def _alloc(n: int, dtype: str) -> TileArray:
    import pycuda.driver as drv

    allocation = drv.mem_alloc(max(1, n * cases.DTYPES[dtype].itemsize))
    return TileArray(int(allocation), (n,), dtype, owner=allocation)


class Buffers:
    """``rotations`` sets (out, inputs) of device arrays for one case; set 0 holds the uploaded
    inputs. With ``in_place`` (nstream) a set's output is its first input."""

    def __init__(
        self, host_inputs: list[np.ndarray], out_dtype: str, in_dtype: str, rotations: int, in_place: bool = False
    ):
        import pycuda.driver as drv

        self.drv, self.host_inputs = drv, host_inputs
        n = host_inputs[0].size
        self.sets = []
        for _ in range(rotations):
            ins = [_alloc(n, in_dtype) for _ in host_inputs]
            self.sets.append((ins[0] if in_place else _alloc(n, out_dtype), ins))
        self.reset()
        for _, ins in self.sets[1:]:
            for src, dst in zip(self.sets[0][1], ins):
                drv.memcpy_dtod(dst.ptr, src.ptr, src.nbytes)

    def reset(self) -> None:
        """Upload the inputs into set 0 again (nstream overwrote its first input)."""
        for host, t in zip(self.host_inputs, self.sets[0][1]):
            self.drv.memcpy_htod(t.ptr, host)

    def read_out(self, dtype: str) -> np.ndarray:
        """The first CHECKED_PREFIX elements of set 0's result."""
        out = self.sets[0][0]
        host = np.empty(min(out.size, CHECKED_PREFIX), cases.host_dtype(dtype))
        self.drv.memcpy_dtoh(host, out.ptr)
        return host

    def free(self) -> None:
        for out, ins in self.sets:
            for t in ins if out is ins[0] else [out, *ins]:
                t._owner.free()
        self.sets = []


def _stream_launchers(models: dict, op: str, dtype: str) -> dict:
    """model name -> launch(out, ins) for the models that can run this stream."""
    scalar = cases.scalar_for(dtype)
    launch = {"cuda_c": lambda out, ins: models["cuda_c"].stream(op, dtype, out, ins, scalar)}
    if "triton" in models:
        launch["triton"] = lambda out, ins: models["triton"].stream(op, out, ins, scalar)
    if "cupy" in models and dtype != "bf16":
        launch["cupy"] = lambda out, ins: models["cupy"].stream(op, out, ins, scalar)
    if "cutile" in models:
        launch["cutile"] = lambda out, ins: models["cutile"].stream(op, out, ins, scalar)
    return launch


def _unary_launchers(models: dict, case: str) -> dict:
    if case == "fib":
        launch = {"cuda_c": lambda out, ins: models["cuda_c"].unary("fib", out, ins[0])}
        if "triton" in models:
            launch["triton"] = lambda out, ins: models["triton"].fib(out, ins[0], "unrolled")
            launch["triton_tilemax"] = lambda out, ins: models["triton"].fib(out, ins[0], "tilemax")
        if "cupy" in models:
            launch["cupy"] = lambda out, ins: models["cupy"].fib(out, ins[0])
        if "cutile" in models:
            launch["cutile"] = lambda out, ins: models["cutile"].fib(out, ins[0])
        return launch
    n_values = int(case.removeprefix("heavy"))
    launch = {"cuda_c": lambda out, ins: models["cuda_c"].unary(f"heavy_{n_values}", out, ins[0])}
    if "triton" in models:
        launch["triton"] = lambda out, ins: models["triton"].heavy(out, ins[0], n_values)
    return launch


_HOST_CACHE: dict = {}


def _stream_host(dtype: str, n: int) -> list[np.ndarray]:
    """Three input arrays per (dtype, n), shared by the five streams (generating 2^28 values takes a while)."""
    key = (dtype, n)
    if key not in _HOST_CACHE:
        _HOST_CACHE.clear()  # one size at a time: fp64 at 2^28 is 6 GB of host memory
        _HOST_CACHE[key] = cases.stream_inputs("nstream", dtype, n, seed=n.bit_length(), bits=True)
    return _HOST_CACHE[key]


def run_case(models: dict, spec: dict, l2_bytes: int, copy_gbps, repeats: int) -> list[dict]:
    """Rows for one (case, dtype, size): one per model, with timing, ratio and correctness."""
    case, dtype, n = spec["case"], spec["dtype"], 1 << spec["log2"]
    if case in cases.STREAMS:
        op = cases.STREAMS[case]
        host = _stream_host(dtype, n)[: op.inputs]
        launchers, out_dtype, in_place, moved = (
            _stream_launchers(models, case, dtype),
            dtype,
            op.in_place,
            op.bytes_per_element,
        )
    elif case == "fib":
        host, out_dtype, in_place, moved = [cases.fib_inputs(n, seed=1)], "int64", False, 2
        launchers = _unary_launchers(models, case)
    else:
        host, out_dtype, in_place, moved = [cases.heavy_inputs(n, seed=2)], "uint32", False, 2
        launchers = _unary_launchers(models, case)
    itemsize = cases.DTYPES[dtype].itemsize
    set_bytes = n * itemsize * moved
    buffers = Buffers(host, out_dtype, dtype, timing.rotations_for(set_bytes, l2_bytes), in_place)
    rows, reference = [], None
    try:
        for model, launch in launchers.items():  # cuda_c first: it is the reference
            row = dict(spec, model=model, n=n)
            try:
                buffers.reset()
                launch(*buffers.sets[0])
                got = buffers.read_out(out_dtype)
                if reference is None:
                    reference = got
                    row["matches_numpy"] = _check_numpy(case, dtype, host, got)
                row["correctness"] = compare.differences(got, reference, out_dtype)
                t = timing.time_launches(
                    lambda i, launch=launch: launch(*buffers.sets[i % len(buffers.sets)]),
                    n,
                    len(buffers.sets),
                    repeats=repeats,
                )
                row.update(t)
                row["gelems"] = n / (t["median_ms"] * 1e6)
                row["gbps"] = set_bytes / (t["median_ms"] * 1e6)
                row["fraction_of_copy"] = row["gbps"] / copy_gbps(n * itemsize)
            except Exception as exc:  # one model failing must not lose the others' rows
                row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            rows.append(row)
    finally:
        buffers.free()
    base = next((r for r in rows if r["model"] == "cuda_c" and "gelems" in r), None)
    for r in rows:
        if base and "gelems" in r:
            r["ratio_to_cuda_c"] = r["gelems"] / base["gelems"]
    return rows


def _check_numpy(case: str, dtype: str, host: list[np.ndarray], got: np.ndarray) -> bool | None:
    """Is the CUDA C result the numpy reference on a prefix? (exactly for integers; None for floats)."""
    host, got = [h[:NUMPY_PREFIX] for h in host], got[:NUMPY_PREFIX]
    if case == "fib":
        return bool((got == cases.fib_reference(host[0])).all())
    if case.startswith("heavy"):
        return bool((got == cases.heavy_reference(host[0], int(case.removeprefix("heavy")))).all())
    if cases.DTYPES[dtype].is_float:
        return None  # rounding may differ legitimately (FMA contraction): the ULP columns say how much
    want = cases.STREAMS[case].reference(cases.scalar_for(dtype), *[h.copy() for h in host])
    return bool((got == want).all())
