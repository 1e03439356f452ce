"""MNIST from the committed IDX files: verified, decoded, split, one-hot."""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from pathlib import Path

import numpy as np

# The checkout's copy when the package runs from it (a git clone, an editable install).
# A wheel (pip install .) sits in site-packages with no data: then the checkout holding
# the current folder, --data or MINITORCH_CUDA_DATA says where it is.
MNIST_DIR = Path(__file__).resolve().parent.parent / "data" / "mnist"
DATA_ENV = "MINITORCH_CUDA_DATA"
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


class DatasetError(ValueError):
    """A data file is missing, corrupted or not in the expected format."""


def _expected_checksums(directory: Path) -> dict[str, str]:
    sums = directory / "SHA256SUMS"
    if not sums.exists():
        raise DatasetError(f"{sums} is missing: cannot verify the MNIST files")
    pairs = (line.split() for line in sums.read_text().splitlines() if line.strip())
    return {name.lstrip("*"): digest for digest, name in pairs}


def _read_idx(path: Path, expected_sha256: str | None) -> np.ndarray:
    if not path.exists():
        raise DatasetError(f"MNIST file {path} is missing")
    raw = path.read_bytes()
    if expected_sha256 is not None and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise DatasetError(f"{path.name} is corrupted: its SHA-256 does not match SHA256SUMS")
    try:
        data = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path.name} is not a valid gzip file: {exc}") from None
    magic = int.from_bytes(data[:4], "big")
    if magic >> 8 != 0x08:  # 0x08 = unsigned bytes; the low byte counts dimensions
        raise DatasetError(f"{path.name} is not an unsigned-byte IDX file (magic {magic:#010x})")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != np.prod(shape):
        raise DatasetError(f"{path.name} holds {body.size} bytes of data, its header promises {shape}")
    return body.reshape(shape)


def _holds_mnist(folder: Path) -> bool:
    return (folder / "SHA256SUMS").exists() or any((folder / name).exists() for name in FILES.values())


def checkout_around(folder: Path) -> Path | None:
    """The minitorch-cuda checkout that holds ``folder`` (itself or a parent), or None."""
    for candidate in (folder, *folder.parents):
        project = candidate / "pyproject.toml"
        if project.is_file() and 'name = "minitorch-cuda"' in project.read_text(errors="replace"):
            return candidate
    return None


def mnist_dir(directory: str | Path | None = None) -> Path:
    """Where the MNIST files are: ``directory`` if given, else ``$MINITORCH_CUDA_DATA``,
    else the ``data/mnist`` of the checkout the package runs from, else that of the
    checkout holding the current folder (a non-editable install run inside the clone).
    A folder may hold the files itself or in an ``mnist/`` subfolder (so both ``data``
    and ``data/mnist`` work). Raises DatasetError, saying how to point at the data,
    when no folder holds them."""
    how = (
        f"pass --data DIR or set {DATA_ENV}=DIR, DIR holding the four IDX files and SHA256SUMS "
        "of the repository's data/mnist"
    )
    if directory is not None or os.environ.get(DATA_ENV):
        given = Path(directory if directory is not None else os.environ[DATA_ENV])
        source = "the folder given" if directory is not None else DATA_ENV
        for candidate in (given, given / "mnist"):
            if _holds_mnist(candidate):
                return candidate
        raise DatasetError(f"MNIST not found in {given} ({source}); {how}")
    if _holds_mnist(MNIST_DIR):
        return MNIST_DIR
    checkout = checkout_around(Path.cwd())
    if checkout is not None and _holds_mnist(checkout / "data" / "mnist"):
        return checkout / "data" / "mnist"
    where = (
        f"the checkout {checkout} has no data/mnist"
        if checkout is not None
        else f"the current folder {Path.cwd()} is not inside a minitorch-cuda checkout"
    )
    raise DatasetError(
        f"MNIST not found: the package was installed without the data ({MNIST_DIR.parent.parent} has no "
        f"data/mnist) and {where}; run it inside the clone, or {how}"
    )


def load_mnist(directory: str | Path | None = None, verify: bool = True):
    """(x_train, y_train, x_test, y_test): images as float32 rows of 784 in [0, 1], labels as int64.

    ``directory`` is resolved by ``mnist_dir``: the argument, ``$MINITORCH_CUDA_DATA``, a checkout."""
    directory = mnist_dir(directory)
    sums = _expected_checksums(directory) if verify else {}
    arrays = {key: _read_idx(directory / name, sums.get(name) if verify else None) for key, name in FILES.items()}

    def images(key):
        return arrays[key].reshape(len(arrays[key]), -1).astype(np.float32) / 255.0

    return (
        images("train_images"),
        arrays["train_labels"].astype(np.int64),
        images("test_images"),
        arrays["test_labels"].astype(np.int64),
    )


def one_hot(labels: np.ndarray, classes: int = 10) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= classes:
        raise ValueError(f"labels must be integers in [0, {classes})")
    out = np.zeros((len(labels), classes), dtype=np.float32)
    out[np.arange(len(labels)), labels] = 1.0
    return out


def train_val_split(x: np.ndarray, y: np.ndarray, val_fraction: float = 0.1, seed: int = 42):
    """(x_train, x_val, y_train, y_val), shuffled once with a fixed seed."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = int(round(len(x) * val_fraction))
    val, train = order[:n_val], order[n_val:]
    return x[train], x[val], y[train], y[val]
