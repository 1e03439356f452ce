"""MNIST loading: verified, decoded, split and one-hot; bad files raise DatasetError."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest
from conftest import mnist_available, needs_mnist

import minitorch_cuda as mt
from minitorch_cuda.data import FILES, MNIST_DIR, DatasetError, load_mnist, mnist_dir, one_hot, train_val_split


@needs_mnist
def test_load_mnist_shapes_and_ranges():
    x, y, x_test, y_test = load_mnist()
    assert x.shape == (60000, 784) and x_test.shape == (10000, 784)
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert 0.0 <= x.min() and x.max() <= 1.0 and x.max() == 1.0
    assert set(np.unique(y)) == set(range(10)) and set(np.unique(y_test)) == set(range(10))


@pytest.fixture
def mnist_copy(tmp_path):
    if not mnist_available():
        pytest.skip(f"MNIST files not found in {MNIST_DIR}")
    for path in MNIST_DIR.iterdir():
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    return tmp_path


@pytest.mark.parametrize("key", sorted(FILES))
def test_corrupted_file_is_named(mnist_copy, key):
    name = FILES[key]
    raw = bytearray((mnist_copy / name).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (mnist_copy / name).write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match=f"{name} is corrupted"):
        load_mnist(mnist_copy)
    with pytest.raises(DatasetError, match=name):  # without the checksum the decoder notices
        load_mnist(mnist_copy, verify=False)
    assert mt.ones((2,)).sum().item() == 2.0


def test_missing_file_is_named(mnist_copy):
    (mnist_copy / FILES["test_labels"]).unlink()
    with pytest.raises(DatasetError, match=f"{FILES['test_labels']} is missing"):
        load_mnist(mnist_copy)


def test_missing_checksums(mnist_copy):
    (mnist_copy / "SHA256SUMS").unlink()
    with pytest.raises(DatasetError, match="SHA256SUMS is missing"):
        load_mnist(mnist_copy)


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetError, match="MNIST not found in .*nowhere.*pass --data DIR or set MINITORCH_CUDA_DATA"):
        load_mnist(tmp_path / "nowhere")


def test_data_folder_from_the_environment(mnist_copy, tmp_path_factory, monkeypatch):
    """MINITORCH_CUDA_DATA names the folder when no argument does; a folder that holds
    the files in mnist/ (the repository's data/) works as well as the files' own."""
    parent = tmp_path_factory.mktemp("data")
    shutil.copytree(mnist_copy, parent / "mnist")
    monkeypatch.setenv("MINITORCH_CUDA_DATA", str(parent))
    assert mnist_dir() == parent / "mnist"
    assert mnist_dir(mnist_copy) == mnist_copy  # an argument wins over the environment
    monkeypatch.setenv("MINITORCH_CUDA_DATA", str(parent / "empty"))
    with pytest.raises(DatasetError, match="MINITORCH_CUDA_DATA"):
        mnist_dir()


def test_wrong_format_is_named(mnist_copy):
    name = FILES["train_labels"]
    (mnist_copy / name).write_bytes(gzip.compress(b"\x00\x00\x0d\x01" + b"\x00\x00\x00\x02" + b"\x01\x02"))
    with pytest.raises(DatasetError, match=f"{name} is not an unsigned-byte IDX file"):
        load_mnist(mnist_copy, verify=False)
    (mnist_copy / name).write_bytes(gzip.compress(b"\x00\x00\x08\x01" + b"\x00\x00\x00\x05" + b"\x01\x02"))
    with pytest.raises(DatasetError, match=f"{name} holds 2 bytes of data"):
        load_mnist(mnist_copy, verify=False)
    broken = bytearray(gzip.compress(bytes(range(256)) * 100))
    broken[12] ^= 0xFF  # inside the deflate stream: zlib's own error, not OSError
    (mnist_copy / name).write_bytes(bytes(broken))
    with pytest.raises(DatasetError, match=f"{name} is not a valid gzip file"):
        load_mnist(mnist_copy, verify=False)
    (mnist_copy / name).write_bytes(b"not gzip at all")
    with pytest.raises(DatasetError, match=f"{name} is not a valid gzip file"):
        load_mnist(mnist_copy, verify=False)


def test_one_hot():
    out = one_hot(np.array([0, 3, 9]))
    assert out.dtype == np.float32 and out.shape == (3, 10)
    assert np.array_equal(out.argmax(1), [0, 3, 9]) and np.all(out.sum(1) == 1)
    for bad in (np.array([10]), np.array([-1]), np.array([0.5])):
        with pytest.raises(ValueError, match=r"labels must be integers in \[0, 10\)"):
            one_hot(bad)


def test_train_val_split():
    x, y = np.arange(100).reshape(50, 2), np.arange(50)
    x_train, x_val, y_train, y_val = train_val_split(x, y, 0.2, seed=1)
    assert len(x_val) == 10 and len(x_train) == 40
    assert np.array_equal(x_train[:, 0] // 2, y_train) and np.array_equal(x_val[:, 0] // 2, y_val)
    assert sorted(np.concatenate([y_train, y_val]).tolist()) == list(range(50))
    again = train_val_split(x, y, 0.2, seed=1)
    assert np.array_equal(again[3], y_val)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="val_fraction"):
            train_val_split(x, y, bad)


@needs_mnist
def test_an_install_without_the_data_finds_the_checkout_it_runs_in(tmp_path, monkeypatch):
    """A non-editable install (pip install .) has no data next to the package: inside the clone,
    from any of its folders, the clone's data/mnist is found; outside it, the error says where it
    looked and how to point at the data."""
    from minitorch_cuda import data

    monkeypatch.delenv("MINITORCH_CUDA_DATA", raising=False)
    monkeypatch.setattr(data, "MNIST_DIR", tmp_path / "site-packages" / "data" / "mnist")
    checkout = MNIST_DIR.parent.parent
    monkeypatch.chdir(checkout / "minitorch_cuda" / "kernels")
    assert mnist_dir() == checkout / "data" / "mnist"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError) as err:
        mnist_dir()
    message = str(err.value)
    assert "installed without the data" in message and str(tmp_path) in message and "not inside" in message
    assert "run it inside the clone" in message and "--data DIR" in message and "checkout's" not in message
