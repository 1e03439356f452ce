"""``minitorch-cuda``: one command for the course's jobs.

Usage:
    minitorch-cuda bench [...]          the blog's benchmark (GPU)
    minitorch-cuda train [--device cpu] a short MNIST training, on any machine
    minitorch-cuda grade SUBMISSIONS --out grades.csv
"""

from __future__ import annotations

import argparse
import sys
import time


def train_main(argv: list[str]) -> int:
    from . import stages, train
    from .device import cuda_available

    parser = argparse.ArgumentParser(prog="minitorch-cuda train", description="Train the blog's MLP on MNIST.")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--stage", type=int, default=stages.DEFAULT_STAGE)
    parser.add_argument("--activation", choices=["relu", "sigmoid"], default="relu")
    args = parser.parse_args(argv)
    stages.set_stage(args.stage)
    data = train.load_to(args.device)
    trainer = train.Trainer(train.Protocol(activation=args.activation), args.device)
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        loss = trainer.epoch(data.x_train, data.y_train)
        elapsed = time.perf_counter() - start
        val = train.accuracy(trainer.net, data.x_val, data.labels_val)
        print(f"epoch {epoch}: loss {loss:.4f}, validation accuracy {val:.2%}, {elapsed:.2f} s on {args.device}")
    print(f"test accuracy: {train.accuracy(trainer.net, data.x_test, data.labels_test):.2%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"bench": "minitorch_cuda.bench", "train": None, "grade": "minitorch_cuda.grade"}
    if not argv or argv[0] not in commands:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return train_main(rest)
    import importlib

    return importlib.import_module(commands[command]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
