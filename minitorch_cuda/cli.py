"""minitorch-cuda: one command for the course's jobs.

Run `minitorch-cuda COMMAND --help` for a command's options.
"""

from __future__ import annotations

import argparse
import sys
import time

from .cli_parser import Parser

# command -> (module whose main(argv, prog) runs it, or None for train below; one line of help)
COMMANDS = {
    "bench": ("minitorch_cuda.bench", "the blog's benchmark of stages 0-8, with PyTorch eager beside it (needs a GPU)"),
    "train": (None, "train the blog's MLP on MNIST for a few epochs, on the GPU or the CPU"),
    "grade": ("minitorch_cuda.grade", "grade a folder of students' exercise notebooks"),
}


def version() -> str:
    """The installed distribution's version (the checkout's pyproject.toml when not installed)."""
    from importlib import metadata

    try:
        return metadata.version("minitorch-cuda")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number is needed, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def _stage(text: str) -> int:
    from . import stages

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a stage is a whole number from 0 to {stages.MAX_STAGE}, got {text!r}"
        ) from None
    if not 0 <= value <= stages.MAX_STAGE:
        raise argparse.ArgumentTypeError(f"the stages run from 0 to {stages.MAX_STAGE}, got {value}")
    return value


def train_parser(prog: str = "minitorch-cuda train") -> argparse.ArgumentParser:
    from . import stages
    from .data import DATA_ENV
    from .device import cuda_available

    gpu = cuda_available()
    parser = Parser(
        prog=prog,
        description="Train the blog's MLP 784-256-128-10 on MNIST with its protocol (batch 64, RmsProp, "
        "gradient clipping at norm 1) and print the loss and accuracy after each epoch.",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if gpu else "cpu",
        help=f"where to train (default: cuda where a GPU is usable, else cpu; here: {'cuda' if gpu else 'cpu'})",
    )
    parser.add_argument(
        "--epochs", type=_int_at_least(1), default=1, help="passes over the training split (default: 1)"
    )
    parser.add_argument(
        "--batches",
        type=_int_at_least(1),
        default=None,
        help="stop each epoch after this many batches (default: all 844)",
    )
    parser.add_argument(
        "--stage",
        type=_stage,
        default=None,
        help=f"the CUDA backend's optimization stage, 0 (the blog's naive version) to {stages.MAX_STAGE} "
        f"(default: {stages.DEFAULT_STAGE}, the blog's last step); the CPU backend has no stages",
    )
    parser.add_argument(
        "--activation",
        choices=["relu", "sigmoid"],
        default="relu",
        help="the hidden layers' activation (default: relu)",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        default=None,
        help=f"the MNIST folder, data/ or data/mnist (default: ${DATA_ENV} if set, else the data/mnist of the "
        "checkout the package runs from or of the one holding the current folder)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on a terminal)")
    return parser


def train_main(argv: list[str], prog: str = "minitorch-cuda train") -> int:
    from . import stages, train
    from .data import DatasetError
    from .device import cuda_available, cuda_unavailable_reason

    parser = train_parser(prog)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not cuda_available():
        parser.error(f"--device cuda needs a usable GPU: {cuda_unavailable_reason()}; or train with --device cpu")
    if args.stage is not None and args.device == "cpu":
        print(f"note: --stage {args.stage} selects CUDA kernels; the CPU backend ignores it", file=sys.stderr)
    stages.set_stage(stages.DEFAULT_STAGE if args.stage is None else args.stage)
    try:
        data = train.load_to(args.device, args.data)
    except DatasetError as err:
        damaged = "not found" not in str(err)  # the not-found message names its fix already
        fix = "; restore data/mnist from the repository (git checkout data/mnist) or pass --data a good copy"
        print(f"{prog}: error: {err}{fix if damaged else ''}", file=sys.stderr)
        return 2  # as every command's setup error: one line, status 2
    from tqdm.auto import tqdm

    protocol = train.Protocol(activation=args.activation)
    trainer = train.Trainer(protocol, args.device)
    steps = -(-len(data.x_train) // protocol.batch_size)
    steps = min(steps, args.batches) if args.batches else steps
    where = args.device if args.device == "cpu" else f"cuda, stage {stages.get_stage()}"
    for epoch in range(1, args.epochs + 1):
        bar = tqdm(
            total=steps, desc=f"epoch {epoch}/{args.epochs}", unit="step", leave=False, disable=args.no_progress or None
        )

        def on_step(loss: float, bar=bar) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

        start = time.perf_counter()
        loss = trainer.epoch(data.x_train, data.y_train, max_batches=args.batches, on_step=on_step)
        elapsed = time.perf_counter() - start
        bar.close()
        val = train.accuracy(trainer.net, data.x_val, data.labels_val)
        print(
            f"epoch {epoch}: loss {loss:.4f}, validation accuracy {val:.2%}, {steps} steps, {elapsed:.2f} s on {where}"
        )
    print(f"test accuracy: {train.accuracy(trainer.net, data.x_test, data.labels_test):.2%}")
    return 0


def top_parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:7s}{text}" for name, (_, text) in COMMANDS.items())
    parser = Parser(
        prog="minitorch-cuda",
        description="The minitorch-cuda course's commands.",
        epilog=f"commands:\n{listing}\n\nRun 'minitorch-cuda COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="minitorch-cuda [-h] [--version] COMMAND [OPTIONS]",
    )
    parser.add_argument("--version", action="version", version=f"minitorch-cuda {version()}")
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        # --help, --version, a typo or nothing at all: argparse prints and exits (0 or 2)
        top_parser().parse_args(argv)
    command, rest = argv[0], argv[1:]
    prog = f"minitorch-cuda {command}"
    if command == "train":
        return train_main(rest, prog)
    import importlib
    import inspect

    run = importlib.import_module(COMMANDS[command][0]).main
    # a main that takes prog names itself as typed here; one that does not names itself
    return run(rest, prog=prog) if "prog" in inspect.signature(run).parameters else run(rest)


if __name__ == "__main__":
    sys.exit(main())
