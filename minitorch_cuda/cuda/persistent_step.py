"""Stage 13: the protocol's whole training step as one launch of ``persistent_step``.

``PersistentStep(layers, optimizer, rmsprop, max_norm, max_rows)`` takes the model as the kernel
computes it: a chain of ``StepLayer``s (each layer's weight and bias arrays, the activation after
it, and RmsProp's state of each) and the optimizer whose ``lr`` (RmsProp: ``decay``, ``eps``)
each launch reads; which frontend models, losses and optimizers come to that is
``minitorch_cuda/persistent_model.py``'s check (the backend knows no ``nn`` or ``optim``). A
chain the kernel cannot hold raises ``DoesNotFit``, naming what does not fit.

It packs, once, a device-side table of the layers: the parameters and the RmsProp state are the
framework's own arrays (the kernel updates them in place, so they read as usual afterwards), and the
gradients, activations and deltas are buffers of its own for up to ``max_rows`` rows. A step is one
launch on the batch's rows as they lie (no copy) and the loss read back. The kernel finds the rows
through a cursor on the device (batch_cursor.BatchCursor) and moves it past them, so consecutive
batches of one array, as ``Trainer.epoch`` hands them out, need no write from the host between
steps. Where CUDA graphs are on (stage 11 up) the launch is captured once per batch size after one
eager step and replayed: a step is then one ``cuGraphLaunch``, without the two copies into static
inputs that stage 11's ``GraphedStep`` needs, and the replayed kernel hands its loss to the host
itself as soon as it is known, halfway through (step_report.StepReport): the host queues the next
step while this one computes its gradients and update. An eager launch's loss is copied back once it
is done. The optimizer's ``lr``, ``decay`` and ``eps`` are read at each launch (a captured graph
keeps those of its capture, as stage 11's does). Gradients never reach ``p.grad``: after a step they
are gone, as after stage 11's ``zero_grad``.

The kernel has four phases and three grid barriers whatever the depth: the first layer's
products in tiles and slices of k; then a block per row of the batch carries it through the
later layers, the loss and the deltas down to the first layer (a row needs no other row for
that); then every gradient; then the clipped update (persistent_step.cu says why). Where the
later layers' weights do not fit in shared memory (layers 512 wide), every row's block would read
them from L2 forward and backward; then (``wide``, on by default) the layers before the first
from which on they fit (``rows_from``) run as tiles across the grid instead, a grid barrier after
each forward and each backward: 2 row_from + 1 barriers. The layer
table and a row's outputs of every layer live in shared memory: a model of more than
PS_MAX_LAYERS (16) layers, or whose layers' widths sum to more than PS_ROW_FLOATS (2048), does
not fit. The rows phase reads the later layers' weights and biases from a copy in shared
memory where all of them fit beside the kernel's own (``staging``; 142 KB for the protocol's
model), else in place; ``stage=False`` leaves them in place, for the comparison chapter 21 makes.
``split`` (on by default) slices the first layer's k by
``forward_splits``' rule, from the shapes alone, so every grid computes the same bits;
``split=False`` gives one slice, for the comparison chapter 21 makes.
``phase_times`` runs steps of the kernel built with PS_PHASE_CLOCK and returns each phase's
microseconds from the GPU's %globaltimer.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np

from .. import stages
from . import graphs, launchers, registry
from .array import DeviceArray
from .batch_cursor import BatchCursor
from .kernel_table import KERNEL_DIR, PERSISTENT
from .ops_tensor import full, item
from .runtime import Kernel, copy_dtoh, copy_htod
from .step_report import StepReport

ACTIVATION_CODES = {None: 0, "relu": 1, "sigmoid": 2}  # persistent_step.cu's ACT_NONE, ACT_RELU, ACT_SIGMOID


def struct_dtype(file: str, name: str) -> np.dtype:
    """The numpy dtype of C struct ``name`` in a kernel file, read from its declaration: each
    field in order, a pointer as 8 bytes, an int as 4 (the only kinds it may hold)."""
    text = re.sub(r"//[^\n]*", "", (KERNEL_DIR / file).read_text())
    body = re.search(rf"\bstruct {name}\s*{{([^}}]*)}};", text)
    if body is None:
        raise KeyError(f"no struct {name} in {file}")
    fields = []
    for kind, names in re.findall(r"([\w\s]+?\*?)\s*((?:\w+\s*,\s*)*\w+)\s*;", body[1]):
        if "*" not in kind and kind.split() != ["int"]:
            raise TypeError(f"struct {name} in {file}: field {names} of type {kind.strip()} is not a pointer or int")
        fields += [(n.strip(), "<u8" if "*" in kind else "<i4") for n in names.split(",")]
    return np.dtype(fields)


# A row of the layer table: kernels/persistent_step.cu's PersistentLayer, field for field.
LAYER = struct_dtype("persistent_step.cu", "PersistentLayer")
if LAYER.itemsize != PERSISTENT["LAYER_BYTES"]:  # the C side's static_assert checks sizeof against the same
    raise AssertionError(
        f"PersistentLayer packs to {LAYER.itemsize} bytes here, PS_LAYER_BYTES says {PERSISTENT['LAYER_BYTES']}"
    )
_POINTERS = ("w", "b", "gw", "gb", "vw", "vb", "out", "delta", "split")  # the arrays a layer's row points at
# forward_splits' rule. SPLIT_JOBS: the jobs the first forward aims at, about half the multiprocessors
# of the GPUs the course runs on (132 on an H100 or H200): the other half stage the later layers'
# weights for the rows phase meanwhile (persistent_step.cu's row_block). A constant, never the
# grid's size, so that the bits do not depend on the grid. SPLIT_CHUNKS: the fewest PS_CHUNK chunks
# of k a slice keeps (its tile's loads are then one wait for memory for a few products).
SPLIT_JOBS = 64
SPLIT_CHUNKS = 2


class DoesNotFit(ValueError):
    """The model, its loss or its optimizer is not of the kind stage 13's kernel computes."""


@dataclasses.dataclass(frozen=True)
class StepLayer:
    """One FeedForward layer as the kernel computes it: its parameters (updated in place), the
    activation after it (a key of ACTIVATION_CODES), and RmsProp's state of the weight and the bias
    (None for SGD)."""

    weight: DeviceArray
    bias: DeviceArray
    activation: str | None = None
    state: tuple[DeviceArray, DeviceArray] | None = None


def _check_sizes(shapes: list[tuple[int, int]]) -> None:
    """The kernel keeps the layer table and a row's outputs of every layer in shared memory."""
    if len(shapes) > PERSISTENT["MAX_LAYERS"]:
        raise DoesNotFit(
            f"the model has {len(shapes)} FeedForward layers, more than the {PERSISTENT['MAX_LAYERS']} "
            "of the kernel's layer table"
        )
    widths = sum(n_out for _, n_out in shapes)
    if widths > PERSISTENT["ROW_FLOATS"]:
        raise DoesNotFit(
            f"the layers' outputs sum to {widths} values a row, more than the {PERSISTENT['ROW_FLOATS']} "
            "that the kernel keeps of a row in shared memory"
        )


def _cdiv(n: int, d: int) -> int:
    return -(-n // d)


def forward_splits(rows: int, n_in: int, n_out: int) -> int:
    """Slices of k in the first layer's forward, n_in -> n_out at ``rows`` rows (1: not split): as
    many as bring its jobs (tiles x slices) up to SPLIT_JOBS, each slice SPLIT_CHUNKS chunks of k
    at least. The protocol's 784 -> 256 at 64 rows: 8 (8 tiles of 64 x 32, 49 chunks of 16)."""
    tiles = _cdiv(rows, PERSISTENT["BM"]) * _cdiv(n_out, PERSISTENT["BN"])
    splits = min(SPLIT_JOBS // tiles, _cdiv(n_in, PERSISTENT["CHUNK"]) // SPLIT_CHUNKS)
    return max(splits, 1)


def staged_ld(n_out: int) -> int:
    """The row stride of a layer's staged weights: n_out rounded up to 4 q floats with q odd, so that
    rows start 16 bytes apart and 8 consecutive rows' 16-byte chunks lie in distinct banks."""
    q = _cdiv(n_out, 4)
    return 4 * (q | 1)


def staging(shapes: list[tuple[int, int]], limit_bytes: int, row_from: int = 1) -> tuple[list[tuple[int, int]], int]:
    """(offset, row stride) of each layer's staged weights and bias (its n_in rows of W at the stride, then
    b; ``shapes``: each layer's (n_in, n_out)) in the rows phase's shared memory, in floats, (-1, 0)
    for the layers before ``row_from`` (the rows phase reads only their outputs); and the bytes of it
    all, each launch's dynamic shared memory. Every layer from ``row_from`` on is staged if all fit in
    ``limit_bytes``, none otherwise (0 bytes): their reads then go to global memory, as with
    ``stage=False``."""
    layout, end = [(-1, 0)] * row_from, 0
    for n_in, n_out in shapes[row_from:]:
        ld = staged_ld(n_out)
        layout.append((end, ld))
        end += (n_in + 1) * ld
    return (layout, 4 * end) if 0 < 4 * end <= limit_bytes else ([(-1, 0)] * len(shapes), 0)


def rows_from(shapes: list[tuple[int, int]], limit_bytes: int) -> int:
    """The first layer of the rows phase: 1 where the later layers' weights all fit in ``limit_bytes``
    of shared memory; else the first layer from which on they fit, the layers before it wide
    (computed in tiles across the grid: a row's block would read unstaged weights from L2, forward and
    backward, once per row); the last layer where even its own do not fit."""
    for first in range(1, len(shapes) - 1):
        if staging(shapes, limit_bytes, first)[1]:
            return first
    return max(1, len(shapes) - 1)


def layer_jobs(n_in: int, n_out: int) -> int:
    """The gradient phase's jobs of a layer (its slots of partials): gW tiles, then gb chunks."""
    return _cdiv(n_in, PERSISTENT["BM"]) * _cdiv(n_out, PERSISTENT["BN"]) + _cdiv(n_out, PERSISTENT["THREADS"])


def phase_clock_kernel() -> Kernel:
    """persistent_step built with PS_PHASE_CLOCK (registry.variant, once per process): it takes a
    last argument, ``unsigned long long* phase_ns``, for block 0's %globaltimer readings."""
    return registry.variant("persistent_step", {"PS_PHASE_CLOCK": None}, extra_params="unsigned long long* phase_ns")


class PersistentStep:
    """One model's step as one kernel: ``step(x, y) -> loss`` on device arrays."""

    def __init__(
        self, layers: list[StepLayer], optimizer, rmsprop: bool, max_norm: float, max_rows: int, blocks: int = 0,
        split: bool = True, stage: bool = True, wide: bool = True,
    ):  # fmt: skip
        """``optimizer``: what each launch reads ``lr`` (and with ``rmsprop``, ``decay`` and ``eps``)
        from. ``split`` slices the first layer's k by forward_splits' rule; ``stage`` copies the later
        layers' weights into shared memory where they fit; ``wide`` computes the layers whose weights do
        not fit in tiles instead (rows_from; see the module's docstring)."""
        widths = [layer.weight.shape for layer in layers]  # (n_in, n_out) of each
        _check_sizes(widths)
        if not max_norm > 0 or max_rows < 1:
            raise ValueError(f"max_norm must be positive and max_rows at least 1, got {max_norm!r} and {max_rows!r}")
        if rmsprop and any(layer.state is None for layer in layers):
            raise ValueError("an RmsProp step needs the optimizer's state of every layer's weight and bias")
        self.optimizer, self.max_norm, self.max_rows, self.blocks = optimizer, float(max_norm), max_rows, blocks
        self.rmsprop = rmsprop
        table = np.zeros(len(layers), LAYER)
        self.buffers: list[DeviceArray] = []  # alive as long as the table points at them
        limit = launchers.persistent_step_staging_bytes() if stage else 0
        self.row_from = rows_from(widths, limit) if stage and wide else 1
        layout, self.staged_bytes = staging(widths, limit, self.row_from)
        self.k_splits: list[int] = []  # slices of k in each layer's forward (the first's only may split)
        partial0 = 0
        for i, (row, layer) in enumerate(zip(table, layers)):
            n_in, n_out = layer.weight.shape
            first_split = self.row_from == 1 and i == 0  # a wide first layer's tiles add the bias themselves
            k_splits = forward_splits(max_rows, n_in, n_out) if split and first_split else 1
            shapes = [(n_in, n_out), (n_out,), (max_rows, n_out), (max_rows, n_out)]
            shapes += [(k_splits, max_rows, n_out)] if first_split else []  # the first layer's partial tiles
            own = [DeviceArray.empty(shape) for shape in shapes]
            self.buffers += own
            gw, gb, out, delta, scratch = (*own, None)[:5]
            vw, vb = layer.state if self.rmsprop else (None, None)
            arrays = (layer.weight, layer.bias, gw, gb, vw, vb, out, delta, scratch)
            for name, array in zip(_POINTERS, arrays):
                row[name] = 0 if array is None else array.ptr
            row["n_in"], row["n_out"], row["partial0"] = n_in, n_out, partial0
            row["act"] = ACTIVATION_CODES[layer.activation]
            row["k_splits"], (row["staged"], row["staged_ld"]) = k_splits, layout[i]
            self.k_splits.append(k_splits)
            partial0 += layer_jobs(n_in, n_out)
        self.n_layers, self.n_in, self.n_out = len(layers), widths[0][0], widths[-1][1]
        self.n_partials = partial0
        self.table = DeviceArray.empty((table.nbytes // 4,))
        copy_htod(self.table.ptr, table.view(np.float32))
        self.partials = DeviceArray.empty((partial0,))
        self.row_loss = DeviceArray.empty((max_rows,))
        self.loss = DeviceArray.empty(())
        self.report = StepReport()  # the replayed steps' loss, written by the kernel into host memory
        self.barrier = full((2,), 0.0)  # GridBarrier {count, generation}: zero bits, once
        self.batch = BatchCursor()  # where the step's rows lie: the kernel moves it past them
        self._graphs: dict[int, graphs.Graph] = {}  # per batch size, captured after one eager step
        n, f = self.n_layers, self.row_from  # the phases between its grid barriers, in order (layers from 1)
        self.phases = [f"forward {i}" for i in range(1, f + 1)] + ["rows"]
        self.phases += [f"backward {i}" for i in range(f, 1, -1)] + ["gradients", "update"]
        forward, backward = [f"forward {i}" for i in range(f + 1, n + 1)], [f"backward {i}" for i in range(n, f, -1)]
        start = "first layer's sum" if f == 1 else f"layer {f}'s input"  # the steps of a row in the rows phase
        self.row_steps = [start, *forward, "loss", *backward]

    def launch(self, x: DeviceArray, y: DeviceArray, kernel="persistent_step", phase_ns=None) -> DeviceArray:
        """Queue one step on the batch (x, y); returns the loss array, nothing read back.
        ``kernel``, ``phase_ns``: phase_clock_kernel() and its clock's buffer (phase_times)."""
        self._point_at(x, y)
        self._launch(x.shape[0], kernel, phase_ns)
        self.batch.moved_past(x, y)
        return self.loss

    def _point_at(self, x: DeviceArray, y: DeviceArray) -> None:
        """Check the batch, then aim the kernel's cursor at its rows (BatchCursor.point_at)."""
        rows = x.shape[0]
        if x.shape != (rows, self.n_in) or y.shape != (rows, self.n_out) or not 1 <= rows <= self.max_rows:
            raise ValueError(
                f"the persistent step takes 1..{self.max_rows} rows of {self.n_in} inputs and {self.n_out} "
                f"targets, got inputs {x.shape} and targets {y.shape}"
            )
        self.batch.point_at(x, y)

    def _launch(self, rows: int, kernel="persistent_step", phase_ns=None, report: int = 0) -> None:
        """``report``: the address of the host's word for the loss (StepReport.ptr), or 0 for none."""
        opt = self.optimizer
        decay, eps = (opt.decay, opt.eps) if self.rmsprop else (0.0, 0.0)
        launchers.persistent_step(
            self.table, self.n_layers, self.row_from, self.batch.array, rows, self.row_loss, self.partials,
            self.n_partials, self.loss, report, self.barrier, self.rmsprop, opt.lr, decay, eps, self.max_norm,
            blocks=self.blocks, kernel=kernel, phase_ns=phase_ns, shared_bytes=self.staged_bytes,
        )  # fmt: skip

    def phase_times(self, x: DeviceArray, y: DeviceArray, steps: int) -> dict:
        """``steps`` steps on (x, y) of the kernel built with PS_PHASE_CLOCK, launched directly
        (they train the model, as ``step`` does): the median and mean microseconds of each phase
        of ``phases``, from one grid barrier's release to the next as block 0 sees it (so each
        includes the barrier and the wait for the slowest block), and of the whole kernel from
        block 0's start to its end; ``row_steps``: the same of each step of row 0 in the rows phase,
        in its block (``row_steps`` names them); ``sm_clock_mhz``: block 0's SM clock over the
        kernel (clock64 cycles per %globaltimer nanosecond). On the CPU emulator they are the CPU's
        times and cycles."""
        n_phase, n_row = len(self.phases) + 1, len(self.row_steps) + 1
        stamps = np.zeros(n_phase + n_row + 1, np.uint64)  # the last: block 0's clock cycles
        clock = DeviceArray.empty((2 * stamps.size,))  # 8 bytes a stamp
        kernel = phase_clock_kernel()
        phase_us, row_us, mhz = [], [], []
        for _ in range(steps):
            self.launch(x, y, kernel, clock)
            copy_dtoh(stamps, clock.ptr)
            ns = stamps.astype(np.int64)
            phase_us.append(np.diff(ns[:n_phase]) / 1e3)
            row_us.append(np.diff(ns[n_phase : n_phase + n_row]) / 1e3)
            mhz.append(ns[-1] / max(ns[n_phase - 1] - ns[0], 1) * 1e3)  # cycles per ns, x 1000

        def spread(names, times, key):
            return [{key: name, "median_us": float(np.median(t)), "mean_us": float(t.mean())}
                    for name, t in zip(names, np.array(times).T)]  # fmt: skip

        total = np.array(phase_us).sum(axis=1)
        return {
            "phases": spread(self.phases, phase_us, "phase"),
            "row_steps": spread(self.row_steps, row_us, "step"),
            "total": {"median_us": float(np.median(total)), "mean_us": float(total.mean())},
            "sm_clock_mhz": {"median": float(np.median(mhz)), "mean": float(np.mean(mhz))},
            "steps": steps,
            "rows": x.shape[0],
            "k_splits": self.k_splits,
            "staged_bytes": self.staged_bytes,
            "row_from": self.row_from,
            "grid_barriers": len(self.phases) - 1,
        }

    def step(self, x: DeviceArray, y: DeviceArray) -> float:
        """One training step and its loss."""
        return self.queue(x, y)()

    def queue(self, x: DeviceArray, y: DeviceArray) -> Callable[[], float]:
        """Queue one training step; returns the call that reads its loss back (before the next
        step's queue, which overwrites it). Through a CUDA graph where graphs are on now: the
        first step of each batch size runs eagerly (it compiles the kernel), is read back at
        once, then captured with the report's address; each replay's loss arrives in the report."""
        rows = x.shape[0]
        graphed = stages.cuda_graphs() and graphs.usable_now()
        graph = self._graphs.get(rows) if graphed else None
        if graph is None:
            loss = item(self.launch(x, y), 0)
            if graphed:  # compiled now: capture this batch size for the steps to come
                graph = graphs.Graph()
                with graph.capture():  # recorded, not run: the cursor's address, not the batch's
                    self._launch(rows, report=self.report.ptr)
                self._graphs[rows] = graph
            return lambda: loss
        self._point_at(x, y)
        self.report.arm()
        graph.launch()
        self.batch.moved_past(x, y)
        return self.report.wait
