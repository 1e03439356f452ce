"""Shared test helpers: GPU skipping, device x stage parameters, ``assert_close``.

GPU tests carry ``@pytest.mark.gpu``; where ``minitorch_cuda.cuda_available()``
is False they are skipped here, once, with the reason CUDA cannot be used.
Run them on a GPU machine with ``python3 -m pytest -m gpu -q``. The part of them
marked ``emulated`` here also runs on the CPU emulator (no GPU needed):
``MINITORCH_CUDA_EMULATE=1 python3 -m pytest -m emulated -q``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re

# MINITORCH_CUDA_TEST_GPUS=N spreads pytest-xdist's workers over GPUs 0..N-1 (gw0 on 0,
# gw1 on 1, ...); set here, before anything can initialize CUDA in this worker.
_gpus, _worker = int(os.environ.get("MINITORCH_CUDA_TEST_GPUS") or 0), os.environ.get("PYTEST_XDIST_WORKER", "")
if _gpus > 1 and _worker.startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % _gpus)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import minitorch_cuda as mt  # noqa: E402

# Every stage that computes in full float32 (0-11); stage 12 rounds matmul inputs to
# TF32 and is tested with its own tolerances in test_stages_beyond.py.
STAGES = [s for s in range(mt.MAX_STAGE + 1) if mt.stages.full_fp32(s)]

# (device, stage): the CPU once, CUDA at every stage. Use as
#   @pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
DEVICE_STAGES = [pytest.param("cpu", None, id="cpu")] + [
    pytest.param("cuda", s, id=f"cuda-s{s}", marks=pytest.mark.gpu) for s in STAGES
]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


# The GPU tests of the framework's SIMT stages (0-11), which the CPU emulator runs too; what
# needs a GPU (stage 12's tensor cores, vendor tools, long training runs) is left out.
EMULATED_FILES = {
    "test_autograd.py", "test_bad_input.py", "test_nn_optim.py", "test_ops.py", "test_registry.py",
    "test_stages.py", "test_stages_beyond.py", "test_training.py",
}  # fmt: skip
NEEDS_A_GPU = re.compile(r"tensor_core|tf32|bf16|wgmma|stage_12|every_builtin_kernel|five_cuda_epochs")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "emulated: a GPU test that the CPU emulator runs too (MINITORCH_CUDA_EMULATE=1)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        stage = getattr(item, "callspec", None) and item.callspec.params.get("stage")
        if (
            item.get_closest_marker("gpu") is not None
            and item.path.name in EMULATED_FILES
            and (stage is None or mt.stages.full_fp32(stage))  # stage 12 runs on tensor cores
            and not NEEDS_A_GPU.search(item.name)
        ):
            item.add_marker(pytest.mark.emulated)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not mt.cuda_available():
        pytest.skip(f"needs a CUDA GPU: {mt.cuda_unavailable_reason()} (or the CPU emulator: MINITORCH_CUDA_EMULATE=1)")


# .ci/run's first part (the README's install) logs here what it skipped on this machine for a
# reason other than the GPU, to run just those again once the optional packages are installed.
SKIPPED_LOG = os.environ.get("MINITORCH_CUDA_SKIPPED_LOG")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = (yield).get_result()
    if SKIPPED_LOG and report.skipped and item.get_closest_marker("gpu") is None:
        with open(SKIPPED_LOG, "a") as log:
            log.write(item.nodeid + "\n")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    """Hypothesis's pytest plugin wraps a parametrized test's settings in one more
    layer on every item and never unwraps them; under its "ci" profile (database=None,
    chosen when $CI is set) reading the database walks the layers recursively, so after
    ~1000 items of one test (test_op under the emulator) every item failed with a
    RecursionError inside Hypothesis. Put each test's own settings back after its item."""
    fn = getattr(item.obj, "__func__", item.obj)
    own = getattr(fn, "_hypothesis_internal_use_settings", None)
    yield
    if own is not None:
        fn._hypothesis_internal_use_settings = own


@pytest.fixture(autouse=True)
def _restore_stage():
    """Every test starts and ends at the default stage, whatever it switched to."""
    mt.set_stage(mt.DEFAULT_STAGE)
    yield
    mt.set_stage(mt.DEFAULT_STAGE)


def on(device: str, stage: int | None):
    """A context for one (device, stage) pair: the stage applies to CUDA only."""
    return mt.use_stage(stage) if device == "cuda" and stage is not None else contextlib.nullcontext()


def launch_bounds(file: str) -> dict[str, tuple[int, int]]:
    """{kernel: (most threads, blocks per SM asked)} of every ``extern "C"`` kernel of a kernels/ file, from its
    ``__launch_bounds__`` as the preprocessor expands them (the emulator's scan of g++ -E: the tile
    lists' X-macros included), the arithmetic evaluated."""
    import ast
    import subprocess

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
    import subprocess

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


def needs_module(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip, naming the extra that brings it, where an optional module is not installed: the
    README's no-GPU install (.[dev,book]) leaves out Triton (999 MB) and PyTorch. find_spec, not
    import: importing triton would fix its mode (compiled or interpreted) for this process."""
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{module} is not installed (pip install -e '.[{extra}]')")


needs_triton = needs_module("triton", "triton")


def mnist_available() -> bool:
    from minitorch_cuda.data import FILES, MNIST_DIR

    return all((MNIST_DIR / name).exists() for name in FILES.values())
