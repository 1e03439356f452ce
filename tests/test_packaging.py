"""A non-editable install works as a lab would use it: build the wheel, install
it into a fresh virtual environment, then train on the CPU and grade one
exercise from a folder outside the checkout.

The venv sees this environment's packages (a .pth file naming this interpreter's
site-packages, which works where the tests themselves run in a venv, unlike
--system-site-packages) so that numpy and the grader's dependencies need no
download; the wheel itself goes in with --no-deps and must shadow the checkout's
copy of the package.
"""

from __future__ import annotations

import csv
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import needs_mnist

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    needs_mnist,
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a venv holding the freshly built wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(tmp / "dist")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if build.returncode != 0 and "setuptools" in build.stderr and "No matching distribution" in build.stderr:
        pytest.skip(f"cannot fetch the build backend to build the wheel: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("minitorch_cuda-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    bin_dir = env_dir / "bin"
    # Paths a .pth file names are put on sys.path as they are: the .pth files there (this
    # environment's editable install of the package) are not run, so the wheel is what imports.
    ours = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    venv_site = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(venv_site, "outer_environment.pth").write_text("\n".join(ours) + "\n")
    install = subprocess.run(
        # --ignore-installed: the venv sees this environment's editable install of the same version,
        # which pip would otherwise take as already satisfied and not install the wheel over
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_dir / "python"),
            "install",
            "--no-deps",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    return bin_dir


def _run(bin_dir: Path, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MINITORCH_CUDA_DATA")}
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        cwd=cwd,
        env=clean | (env or {}),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    where = _run(installed, "python", "-c", "import minitorch_cuda; print(minitorch_cuda.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    module = Path(where.stdout.strip())  # under the venv, not the checkout (a prefix of its path may be)
    assert module.is_relative_to(installed.parent) and not module.is_relative_to(ROOT), where.stdout
    version = _run(installed, "minitorch-cuda", "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("minitorch-cuda "), version


def test_train_finds_mnist_in_the_clone_and_needs_to_be_told_elsewhere(installed: Path, tmp_path: Path) -> None:
    lost = _run(installed, "minitorch-cuda", "train", "--device", "cpu", cwd=tmp_path)
    assert lost.returncode == 2 and "MNIST not found" in lost.stderr and "Traceback" not in lost.stderr, lost.stderr
    assert "run it inside the clone" in lost.stderr and "checkout's data/mnist" not in lost.stderr, lost.stderr
    args = ["minitorch-cuda", "train", "--device", "cpu", "--batches", "5", "--no-progress"]
    inside = _run(installed, *args, cwd=ROOT / "chapters")  # as the README says: found by itself in the clone
    assert inside.returncode == 0 and "test accuracy" in inside.stdout, inside.stderr
    for how in (["--data", str(ROOT / "data")], []):
        env = {} if how else {"MINITORCH_CUDA_DATA": str(ROOT / "data" / "mnist")}
        args = ["minitorch-cuda", "train", "--device", "cpu", "--batches", "5", "--no-progress", *how]
        trained = _run(installed, *args, cwd=tmp_path, env=env)
        assert trained.returncode == 0, trained.stderr
        assert "epoch 1: loss" in trained.stdout and "5 steps" in trained.stdout and "test accuracy" in trained.stdout


def test_grade_one_exercise(installed: Path, tmp_path: Path) -> None:
    """The packaged rubric.toml is found and a CPU exercise scores its points."""
    student = tmp_path / "submissions" / "alice"
    student.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "02_floating_point.md", student)
    out = tmp_path / "out" / "grades.csv"
    graded = _run(
        installed,
        "minitorch-cuda",
        "grade",
        str(tmp_path / "submissions"),
        "--out",
        str(out),
        "--no-execute",
        "--exercise",
        "2.1",
        cwd=tmp_path,
    )
    assert graded.returncode == 0, graded.stdout + graded.stderr
    (row,) = csv.DictReader(out.open())
    assert row["student"] == "alice" and float(row["2.1"]) > 0, row
