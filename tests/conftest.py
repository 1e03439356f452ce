"""pytest's hooks, the fixtures every test gets, and the skip markers, each defined once here.

GPU tests carry ``@pytest.mark.gpu``; where ``minitorch_cuda.cuda_available()``
is False they are skipped here, once, with the reason CUDA cannot be used.
Run them on a GPU machine with ``python3 -m pytest -m gpu -q``. The GPU tests of the
modules in ``EMULATED_FILES`` are also marked ``emulated`` here and run on the CPU emulator
(no GPU needed: ``MINITORCH_CUDA_EMULATE=1 python3 -m pytest -m emulated -q``), but for
those marked ``gpu_only`` and those at a stage that computes on tensor cores.

Shared helpers (references, comparisons, inputs) are in helpers.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

# MINITORCH_CUDA_TEST_GPUS=N spreads pytest-xdist's workers over GPUs 0..N-1 (gw0 on 0,
# gw1 on 1, ...); set here, before anything can initialize CUDA in this worker.
_gpus, _worker = int(os.environ.get("MINITORCH_CUDA_TEST_GPUS") or 0), os.environ.get("PYTEST_XDIST_WORKER", "")
if _gpus > 1 and _worker.startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(_worker[2:]) % _gpus)

import pytest  # noqa: E402

import minitorch_cuda as mt  # noqa: E402

# The modules whose GPU tests the CPU emulator runs too: the framework's stages (0-12: the emulator
# models Ampere's tensor cores); what needs a GPU there (Hopper's wgmma, every kernel's build,
# long training runs) is marked gpu_only.
EMULATED_FILES = {
    "test_autograd.py", "test_bad_input.py", "test_nn_optim.py", "test_ops.py", "test_registry.py",
    "test_stages.py", "test_stages_beyond.py", "test_training.py",
}  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "emulated: a GPU test that the CPU emulator runs too (MINITORCH_CUDA_EMULATE=1)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        stage = getattr(item, "callspec", None) and item.callspec.params.get("stage")
        if (
            item.get_closest_marker("gpu") is not None
            and item.path.name in EMULATED_FILES
            and (stage is None or mt.stages.full_fp32(stage))  # stage 12 runs on tensor cores
            and item.get_closest_marker("gpu_only") is None
        ):
            item.add_marker(pytest.mark.emulated)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is None:
        return
    if not mt.cuda_available():
        pytest.skip(f"needs a CUDA GPU: {mt.cuda_unavailable_reason()} (or the CPU emulator: MINITORCH_CUDA_EMULATE=1)")
    if mt.emulator.selected() and item.get_closest_marker("emulated") is None:  # gpu_only ones among them
        pytest.skip("needs a CUDA GPU: the CPU emulator runs only the GPU tests marked emulated (-m emulated)")


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


needs_mnist = pytest.mark.skipif(not mnist_available(), reason="the MNIST files are not in data/mnist (see README.md)")


def needs_program(program: str, why: str, install: str) -> pytest.MarkDecorator:
    """Skip, naming how to install it, where a program the test runs is not on PATH."""
    return pytest.mark.skipif(shutil.which(program) is None, reason=f"{why}: {program} is not on PATH ({install})")


needs_gxx = needs_program(
    os.environ.get("CXX", "g++"), "the CPU emulator builds kernels with g++", "apt-get install g++"
)
needs_nvcc = needs_program("nvcc", "compiling CUDA C needs nvcc", "the CUDA toolkit; no GPU needed")
needs_addr2line = needs_program("addr2line", "a fault's source line comes from addr2line", "apt-get install binutils")
needs_node = needs_program("node", "the page's JavaScript runs in node", "apt-get install nodejs")


def _bwrap_missing() -> bool:
    from minitorch_cuda.grade import sandbox

    return sandbox.bwrap() is None


needs_bwrap = pytest.mark.skipif(
    _bwrap_missing(), reason="the grader's sandbox needs bubblewrap (apt-get install bubblewrap)"
)
