"""What the test modules share: the (device, stage) parameters, comparisons against float64 that
name what differs, matmul inputs and references, builds and runs that several modules make (nvcc's
sm_90 report, a script on the CPU emulator), and N steps of training against a float64 numpy model.

Skip markers, pytest's hooks and fixtures live in conftest.py; a test module imports from here,
never from another test module.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitorch_cuda as mt
from minitorch_cuda import optim
from minitorch_cuda.data import one_hot
from minitorch_cuda.train import Protocol, Trainer, make_net

ROOT = Path(__file__).resolve().parents[1]
NVCC = shutil.which("nvcc")  # the tests that need it are marked conftest.needs_nvcc

# --- parameters ---------------------------------------------------------------------------------

# Every stage that computes in full float32 (0-11); stage 12 rounds matmul inputs to
# TF32 and is tested with its own tolerances in test_stages_beyond.py.
STAGES = [s for s in range(mt.MAX_STAGE + 1) if mt.stages.full_fp32(s)]

# (device, stage): the CPU once, CUDA at every stage. Use as
#   @pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
DEVICE_STAGES = [pytest.param("cpu", None, id="cpu")] + [
    pytest.param("cuda", s, id=f"cuda-s{s}", marks=pytest.mark.gpu) for s in STAGES
]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def on(device: str, stage: int | None):
    """A context for one (device, stage) pair: the stage applies to CUDA only."""
    return mt.use_stage(stage) if device == "cuda" and stage is not None else contextlib.nullcontext()


# --- comparisons --------------------------------------------------------------------------------


def assert_close(actual, ref, atol: float = 1e-5, rtol: float = 1e-4, what: str = "") -> None:
    """``|actual - ref| <= atol + rtol * |ref|`` elementwise, shapes equal, no nan/inf
    where the reference is finite; on failure name the first mismatches."""
    if isinstance(actual, mt.Tensor):
        actual = actual.numpy()
    actual = np.asarray(actual, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    label = f"{what}: " if what else ""
    if actual.shape != ref.shape:
        raise AssertionError(f"{label}shape {actual.shape} != reference shape {ref.shape}")
    bound = atol + rtol * np.abs(ref)
    bad = ~(np.abs(actual - ref) <= bound)  # nan compares False: counted as bad
    bad &= ~((actual == ref) & np.isinf(ref))  # equal infinities are fine
    if bad.any():
        where = np.argwhere(bad) if actual.ndim else np.zeros((1, 0), dtype=int)
        lines = []
        for index in where[:5]:
            i = tuple(int(v) for v in index)
            lines.append(
                f"  at {i}: got {actual[i]!r}, expected {ref[i]!r} "
                f"(|diff| {abs(actual[i] - ref[i]):.3g} > {bound[i]:.3g})"
            )
        raise AssertionError(
            f"{label}{int(bad.sum())} of {bad.size} elements differ (atol={atol}, rtol={rtol}), "
            f"first at:\n" + "\n".join(lines)
        )


def assert_close_by_norm(actual, ref, rtol: float = 1e-4, what: str = "") -> None:
    """``||actual - ref|| <= rtol * ||ref||`` over the whole array: for trained parameters, where
    RmsProp passes a rounding difference nearly whole into the update of a weight whose running
    square is tiny, so single elements may differ while the parameter as a whole agrees."""
    actual, ref = np.asarray(actual, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    diff, size = np.linalg.norm(actual - ref), np.linalg.norm(ref)
    assert diff <= rtol * size, f"{what}: differs by {diff:.3g} in norm, more than {rtol:g} of its {size:.3g}"


def numeric_grad(f, arrays: list[np.ndarray], weight: np.ndarray, h: float = 1e-6) -> list[np.ndarray]:
    """d sum(f(*arrays) * weight) / d arrays, by central differences in float64."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    weight = np.asarray(weight, dtype=np.float64)
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        flat, gflat = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + h
            up = float(np.sum(f(*arrays) * weight))
            flat[i] = old - h
            down = float(np.sum(f(*arrays) * weight))
            flat[i] = old
            gflat[i] = (up - down) / (2 * h)
        grads.append(g)
    return grads


# --- matmul -------------------------------------------------------------------------------------

# (ta, tb): every operand layout a matmul kernel takes
FLAGS = [(False, False), (False, True), (True, False), (True, True)]
# (M, N, K, ta, tb, batch of a, batch of b): ragged edges, every layout, a batch and a broadcast
MATMUL_CASES = [
    (72, 73, 74, 0, 0, (), ()),
    (72, 73, 74, 1, 1, (), ()),
    (1, 1, 1, 0, 1, (), ()),
    (1, 130, 17, 1, 0, (), ()),
    (129, 65, 300, 0, 1, (), ()),
    (129, 65, 300, 1, 0, (), ()),
    (20, 36, 64, 0, 0, (2,), (2,)),
    (33, 40, 48, 1, 1, (2,), ()),
]


def matmul_inputs(M, N, K, ta, tb, batch_a=(), batch_b=(), seed=0):
    """Standard-normal float32 operands, stored transposed where ``ta`` / ``tb`` say."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(tuple(batch_a) + ((K, M) if ta else (M, K))).astype(np.float32)
    b = rng.standard_normal(tuple(batch_b) + ((N, K) if tb else (K, N))).astype(np.float32)
    return a, b


def matmul_reference(a, b, ta, tb):
    """The float64 product and ``|a| @ |b|``, the scale of its rounding error."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    a64 = np.swapaxes(a64, -1, -2) if ta else a64
    b64 = np.swapaxes(b64, -1, -2) if tb else b64
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def batch_first(array: np.ndarray) -> np.ndarray:
    """A product's (..., M, N) as (batch, M, N), as the kernels write it."""
    return array.reshape((-1, *array.shape[-2:]))


def matmul_wrong(out, a, b, ta, tb) -> int:
    """How many elements miss the float64 product by more than the register-tiled tests allow
    (NaN, an unwritten element, counts)."""
    ref, scale = (batch_first(x) for x in matmul_reference(a, b, ta, tb))
    return int(np.sum(~(np.abs(out - ref) <= 1e-5 * scale + 1e-6)))


@functools.cache
def large_product(n: int):
    """The benchmark's n x n x n operands, their float64 product and its error scale (computed once)."""
    a, b = matmul_inputs(n, n, n, False, False, seed=n)
    return a, b, *matmul_reference(a, b, False, False)


def where_wrong(got, ref, scale, bound) -> str:
    """Where a matmul result is off, in the terms of a kernel's layout: rows and columns
    modulo 8 and 16 say whether a fragment mapping or a swizzle is to blame."""
    bad = np.abs(got - ref) > bound * scale + 1e-6
    if not bad.any():
        return "no element off"
    rows, cols = np.nonzero(bad.reshape(-1, bad.shape[-1]) if bad.ndim > 2 else bad)
    return (
        f"{bad.mean():.1%} of elements off; rows mod 16: {sorted({int(r) for r in rows % 16})}, "
        f"columns mod 8: {sorted({int(c) for c in cols % 8})}, first at row {rows[0]}, column {cols[0]}"
    )


# --- builds and runs ----------------------------------------------------------------------------


def launch_bounds(file: str) -> dict[str, tuple[int, int]]:
    """{kernel: (most threads, blocks per SM asked)} of every ``extern "C"`` kernel of a kernels/ file, from its
    ``__launch_bounds__`` as the preprocessor expands them (the emulator's scan of g++ -E: the tile
    lists' X-macros included), the arithmetic evaluated."""
    import ast

    from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
    from minitorch_cuda.emulator import compiler, toolchain

    scan = [toolchain.CXX, "-E", "-x", "c++", "-std=c++17", "-isystem", str(toolchain.INCLUDE),
            "-include", str(toolchain.HEADER), f"-I{KERNEL_DIR}", str(KERNEL_DIR / file)]  # fmt: skip
    text = subprocess.run(scan, capture_output=True, text=True, check=True).stdout

    def value(expression: str) -> int:  # integer arithmetic only: + - * / and parentheses
        tree = ast.parse(expression.strip(), mode="eval")
        allowed = (ast.Expression, ast.BinOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)
        assert all(isinstance(node, allowed) for node in ast.walk(tree)), expression
        return int(eval(compile(tree, file, "eval")))  # noqa: S307  (checked above: numbers and operators)

    found = {}
    for name, (bounds, _) in compiler.kernels(text, c_linkage_only=True).items():
        threads, blocks = [*(bounds or "0").split(","), "0"][:2]  # no bounds, no blocks per SM asked: 0
        found[name] = (value(threads), value(blocks))
    return found


def sm90_build(source, tmp_path, *flags: str) -> dict:
    """nvcc's sm_90 cubin of a kernels/ file and ptxas's -v report of it: {entry: KernelResources}.
    Fails the test where nvcc fails or warns (the build tests of the Hopper kernels share it)."""
    from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
    from minitorch_cuda.cuda.nvcc_check import parse_resources

    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", *flags, "-I", str(KERNEL_DIR),
         "-o", str(tmp_path / "kernel.cubin"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = done.stderr + done.stdout
    assert done.returncode == 0 and "warning" not in log.lower(), log
    return {kernel.name: kernel for kernel in parse_resources(log)}


def cuobjdump() -> str | None:
    """cuobjdump from the CUDA toolkit, or the copy Triton ships."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else None


def run_emulated(script: str, *args: str) -> str:
    """``script`` (with ``args``) in a Python of its own on the CPU emulator: its output; the test
    fails with the script's error where it fails."""
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", script, *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# --- training -----------------------------------------------------------------------------------

STEPS = 20
NARROW = Protocol(hidden=(37, 19), batch_size=21, max_norm=0.5)  # partial tiles, a last batch of 16, clipping


def mnist_shaped(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images of 784 pixels in [0, 1), four in five of them 0 as in MNIST, and one-hot labels."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 784)) * (rng.random((rows, 784)) < 0.2)
    return x.astype(np.float32), one_hot(rng.integers(0, 10, rows))


def train_steps(protocol: Protocol, stage: int, optimizer: str = "rmsprop", without=()) -> tuple[np.ndarray, list]:
    """STEPS steps of the Trainer from the CPU net's initial weights: losses and parameters."""
    x, y = mnist_shaped(STEPS * protocol.batch_size - 5)
    with mt.use_stage(stage, without=without):
        trainer = Trainer(protocol, "cuda")
        for mine, cpu in zip(trainer.net.parameters(), make_net(protocol, "cpu").parameters()):
            mine.assign(cpu.numpy())
        if optimizer == "sgd":
            trainer.optim = optim.SGD(trainer.net.parameters(), lr=0.05)
        losses = []
        with mt.profiler.count() as counts:
            for start in range(0, len(x), protocol.batch_size):
                rows = slice(start, start + protocol.batch_size)
                losses.append(trainer.step(mt.tensor(x[rows], "cuda"), mt.tensor(y[rows], "cuda")))
        if stage == 13:  # a launch a step; once the barrier's zeroing; per batch shape the graph's capture
            assert counts.launches <= len(losses) + 3, f"{counts.launches} launches in {len(losses)} steps"
            # A replay hands its loss over in the report: a copy only for each batch shape's eager step.
            copies = 2 if "cuda_graphs" not in without else len(losses)
            assert counts.dtoh_copies == copies, f"{counts.dtoh_copies} copies back in {len(losses)} steps"
        return np.array(losses), [p.numpy() for p in trainer.net.parameters()]


def training_reference(protocol: Protocol, optimizer: str = "rmsprop") -> tuple[np.ndarray, list, int]:
    """The same steps in float64 numpy: losses, parameters and how many steps were clipped."""
    x, y = (a.astype(np.float64) for a in mnist_shaped(STEPS * protocol.batch_size - 5))
    params = [p.numpy().astype(np.float64) for p in make_net(protocol, "cpu").parameters()]
    weights, biases = params[0::2], params[1::2]
    state = [np.zeros_like(p) for p in params]
    sigmoid = protocol.activation == "sigmoid"
    losses, clipped = [], 0
    for start in range(0, len(x), protocol.batch_size):
        xb, yb = x[start : start + protocol.batch_size], y[start : start + protocol.batch_size]
        acts = [xb]
        for i, (w, b) in enumerate(zip(weights, biases)):
            z = acts[-1] @ w + b
            acts.append(z if i == len(weights) - 1 else 1 / (1 + np.exp(-z)) if sigmoid else np.maximum(z, 0))
        z = acts[-1] - acts[-1].max(1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
        losses.append(-(yb * log_p).sum(1).mean())
        delta = (np.exp(log_p) - yb) / len(xb)
        grads = []
        for i in reversed(range(len(weights))):
            grads[:0] = [acts[i].T @ delta, delta.sum(0)]
            a = acts[i]
            delta = (delta @ weights[i].T) * (a * (1 - a) if sigmoid else a > 0)
        norm = np.sqrt(sum((g * g).sum() for g in grads))
        factor = protocol.max_norm / (norm + 1e-6) if norm > protocol.max_norm else 1.0
        clipped += factor < 1
        for p, g, v in zip(params, grads, state):
            g = g * factor
            if optimizer == "sgd":
                p -= 0.05 * g
            else:
                v[:] = protocol.decay * v + (1 - protocol.decay) * g * g
                p -= protocol.lr * g / (np.sqrt(v) + 1e-8)
    return np.array(losses), params, clipped


def assert_same_training(got, ref, what: str, rtol: float = 1e-4, params_by_norm: bool = False) -> None:
    (losses, params), (ref_losses, ref_params) = got, ref[:2]
    assert_close(losses, ref_losses, 0.0, rtol, f"{what}: losses")
    for i, (p, q) in enumerate(zip(params, ref_params)):
        if params_by_norm:
            assert_close_by_norm(p, q, rtol, f"{what}: parameter {i}")
        else:
            assert_close(p, q, 1e-6, rtol, f"{what}: parameter {i}")
