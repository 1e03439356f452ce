"""The `minitorch-cuda` command as a user meets it: version, help, validated
arguments (a message and exit 2, never a traceback), one-line errors that name
their fix, and a short training on the CPU."""

from __future__ import annotations

import re
import shutil
import sys

import pytest
from conftest import needs_mnist

from minitorch_cuda import cli
from minitorch_cuda.data import MNIST_DIR


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `minitorch-cuda ARGV...`, argparse's exits included."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and re.fullmatch(r"minitorch-cuda \S+\n", out), out


@pytest.mark.parametrize(
    "argv", [["--help"], ["train", "--help"], ["bench", "--help"], ["grade", "--help"], ["grade", "merge", "--help"]]
)
def test_help_is_plain_text_with_every_default(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "``" not in out and ":func:" not in out, "help shows reStructuredText markup"
    assert "(default: None)" not in out and "(default: False)" not in out, "argparse's defaults, not the real ones"
    command = " ".join(a for a in argv if a != "--help")
    assert out.startswith(f"usage: minitorch-cuda {command}".rstrip())
    if argv[0] == "train":
        options = re.findall(r"^  (--[a-z-]+)", out, flags=re.M)
        assert {"--device", "--epochs", "--stage", "--data", "--batches"} <= set(options)
    if argv[0] in ("train", "grade"):
        # each option that takes a value names its default in its help (the text up to the next option)
        for block in re.split(r"\n  (?=--)", out.split("options:")[1])[1:]:
            if re.match(r"--[a-z-]+ [A-Z/]", block):
                assert "default" in block, f"an option without its default: {block!r}"


def test_no_command_is_a_usage_error(capsys):
    code, _, err = run(capsys)
    assert code == 2 and err.startswith("minitorch-cuda: error:") and err.count("\n") == 1, err
    code, _, err = run(capsys, "trian")
    assert code == 2 and "invalid choice: 'trian'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], "argument --epochs: must be at least 1, got 0"),
        (["--epochs", "two"], "argument --epochs: a whole number is needed, got 'two'"),
        (["--stage", "14"], "argument --stage: the stages run from 0 to 13, got 14"),
        (["--stage", "-1"], "the stages run from 0 to 13"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(capsys, argv, message):
    code, _, err = run(capsys, "train", *argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert err.startswith("minitorch-cuda train: error:") and err.endswith("(see --help)\n") and err.count("\n") == 1


def test_cuda_without_a_gpu_is_one_line_naming_the_fix(capsys):
    import minitorch_cuda as mt

    if mt.cuda_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run(capsys, "train", "--device", "cuda")
    line = err.splitlines()[-1]
    assert code == 2 and "--device cuda needs a usable GPU" in line and "--device cpu" in line
    if "PyCUDA is not installed" in line:  # the extra named for a checkout and for an installed package
        assert "pip install -e '.[cuda]'" in line and "pip install 'minitorch-cuda[cuda]'" in line, line


def test_bench_without_a_gpu_is_one_line_naming_the_way_on(capsys, monkeypatch):
    from minitorch_cuda import bench

    monkeypatch.delenv("MINITORCH_CUDA_EMULATE", raising=False)
    monkeypatch.setattr(bench, "cuda_available", lambda: False)
    monkeypatch.setattr(bench, "cuda_unavailable_reason", lambda: "no GPU here")
    code, out, err = run(capsys, "bench")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("minitorch-cuda bench: error: the benchmark needs a CUDA GPU: no GPU here"), err
    assert "minitorch-cuda train --device cpu" in err


def test_missing_data_names_the_fix(capsys, tmp_path):
    code, out, err = run(capsys, "train", "--data", str(tmp_path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "MNIST not found" in err and "MINITORCH_CUDA_DATA" in err


@needs_mnist
def test_corrupted_data_names_the_fix(capsys, tmp_path):
    shutil.copytree(MNIST_DIR, tmp_path / "mnist")
    target = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(target.read_bytes())
    raw[100] ^= 0xFF
    target.write_bytes(bytes(raw))
    code, _, err = run(capsys, "train", "--data", str(tmp_path))
    assert code == 2 and err.count("\n") == 1
    assert "t10k-labels-idx1-ubyte.gz is corrupted" in err and "git checkout data/mnist" in err


@needs_mnist
def test_train_on_the_cpu_a_few_steps(capsys):
    code, out, err = run(capsys, "train", "--device", "cpu", "--batches", "20", "--stage", "3", "--no-progress")
    assert code == 0, err
    assert re.search(r"epoch 1: loss \d\.\d{4}, validation accuracy [\d.]+%, 20 steps, [\d.]+ s on cpu", out), out
    assert "test accuracy:" in out
    assert "note: --stage 3 selects CUDA kernels; the CPU backend ignores it" in err


@pytest.mark.parametrize("argv", [["grade", "--help"], ["grade", "merge", "--help"], ["grade", "subs"]])
def test_grade_without_its_extra_names_it(capsys, monkeypatch, argv):
    """A non-editable install without the grade extra: one line naming the extra, exit 2, no traceback."""
    monkeypatch.setitem(sys.modules, "nbformat", None)  # as if not installed: find_spec and import fail
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("minitorch-cuda grade: error: nbformat is not installed: install the `grade` extra"), err
