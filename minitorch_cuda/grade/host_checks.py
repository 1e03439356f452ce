"""The checks of the Python exercises: launch configuration 1.2, BF16 2.1, memory pool 4.1,
timing 5.1, roofline bound 14.1, graphed step 18.1, TF32 19.1 (20.1 lives with chapter 20).

Each takes the student's object (in the grader, a proxy of it in the subject process: every
call goes over the channel, and the fakes it is handed stay here) and the exercise cell's
source, and fails through ``verdict.fail``. None needs a GPU.
"""

from __future__ import annotations

import numpy as np

from ..numerics import tf32_reference
from . import channel, hidden, python_work
from .fakes import CaptureError, FakeArray, FakeDevice, GraphDevice, QueueingDevice, TinyStep
from .verdict import (
    BOUNDARY,
    EXCEPTION,
    HOST_SIDE,
    WRONG_RESULT,
    call,
    compare,
    expect_value_error,
    fail,
)

# --- 1.2 launch configuration ----------------------------------------------------

FIXED_LAUNCH_SIZES = (1, 31, 255, 256, 257, 1000, 2**20 + 1, 54_000 * 784, 10**9)


def check_launch_config(launch_config, source: str = "") -> list[str]:
    done = []
    # hidden: sizes no table of the fixed ones holds, whole warps per block
    drawn = [(32 * t, n) for t, n in zip(hidden.between("warps", 1, 32, 4), hidden.between("n", 2, 2**31 - 1, 4))]
    cases = [(threads, n) for threads in (256, 1024, 64) for n in FIXED_LAUNCH_SIZES] + drawn
    for threads, n in cases:
        grid, block = call(f"launch_config({n}, {threads})", launch_config, n, threads)
        want_grid, want_block = ((n + threads - 1) // threads, 1, 1), (threads, 1, 1)
        got = (tuple(int(v) for v in grid), tuple(int(v) for v in block))
        if got != (want_grid, want_block):
            reason = BOUNDARY if got[0][0] == want_grid[0] - 1 else WRONG_RESULT
            fail(reason, f"launch_config({n}, {threads}) = {got}, want ({want_grid}, {want_block})")
    fixed = 3 * len(FIXED_LAUNCH_SIZES)
    done.append(f"grid = ceil(n / threads) blocks of (threads, 1, 1) for {fixed} sizes and hidden ones")
    for n in (0, -5):
        expect_value_error(f"launch_config({n}, 256)", launch_config, n, 256, why=" (nothing to launch)")
    done.append("n <= 0 raises ValueError")
    return done


# --- 2.1 BF16 and 19.1 TF32 rounding ----------------------------------------------------


def _rounding_inputs(rng: np.random.Generator, drop: int) -> np.ndarray:
    """float32 values whose rounding to ``23 - drop`` mantissa bits is worth testing: random
    bit patterns, ties, zeros, infinities, subnormals and the edges of overflow (no NaN)."""
    half = 1 << (drop - 1)  # the dropped bits of a tie
    one, inf = 0x3F800000, 0x7F800000
    special = np.array(
        [0, 0x80000000, inf, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 1, 0x007FFFFF]
        + [one | half, one | 3 * half, one | (half - 1), one | (half + 1)]  # even tie, odd tie, near ties
        + [inf - half, inf - half - 1, half, 3 * half],  # overflow edge, subnormal ties
        dtype=np.uint32,
    )
    ties = (rng.integers(0, 2 ** (32 - drop), size=2000, dtype=np.uint64).astype(np.uint32) << drop) | half
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    values = np.concatenate([special, ties, bits]).view(np.float32)
    return values[~np.isnan(values)]


def _rounded(round_fn, x: np.ndarray, what: str) -> np.ndarray:
    """``round_fn`` on a copy of ``x``: a float32 array of x's shape, or the check fails (an empty or
    reshaped result never passes a check of its values)."""
    got = np.asarray(call(f"rounding {what}", round_fn, x.copy()))
    if got.shape != x.shape or got.dtype != np.float32:
        fail(WRONG_RESULT, f"{what}: expected a float32 array of shape {x.shape}, got {got.dtype} {got.shape}")
    return got


def _check_rounding(round_fn, drop: int, reference, against: str) -> list[str]:
    """``round_fn`` must match ``reference`` bit for bit, keep NaN and overflow to inf."""
    rng = np.random.default_rng()
    x = _rounding_inputs(rng, drop)
    want_bits = reference(x.copy()).view(np.uint32)  # before the student's code sees x
    got = _rounded(round_fn, x, f"{x.size} values")
    got_bits = got.view(np.uint32)
    bad = got_bits != want_bits
    if bad.any():
        details = [
            f"input {x[i]!r} (bits 0x{x.view(np.uint32)[i]:08X}): got 0x{got_bits[i]:08X}, want 0x{want_bits[i]:08X}"
            for i in np.flatnonzero(bad)[:5]
        ]
        tie = (x.view(np.uint32) & ((1 << drop) - 1)) == 1 << (drop - 1)
        hint = " (ties: round half to even)" if (bad & tie).sum() == bad.sum() else ""
        fail(WRONG_RESULT, f"{int(bad.sum())} of {x.size} values round differently from {against}{hint}", details)
    done = [f"{x.size} values (random bit patterns, ties, zeros, infinities, subnormals) match {against} bit for bit"]
    whole = python_work.require_whole_array(round_fn, x[:1000], x[:20_000], "your rounding")
    done += [whole] if whole else []
    # payloads that a rounding addition carries into infinity, zero or the sign bit
    nan = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    got_nan = _rounded(round_fn, nan, "NaN payloads")
    if not np.isnan(got_nan).all():
        fail(WRONG_RESULT, f"NaN must stay NaN, got {got_nan}")
    done.append("NaN stays NaN")
    largest = np.finfo(np.float32).max
    edge = np.float32([largest, -largest])
    if not np.array_equal(_rounded(round_fn, edge, "the largest float32"), np.float32([np.inf, -np.inf])):
        fail(WRONG_RESULT, "values that round past the format's largest number must overflow to inf (keeping the sign)")
    done.append("overflow rounds to inf")
    return done


# (ml_dtypes, torch, the framework's numerics: refused at import in the subject, subject_rules.FORBIDDEN)


def check_bf16(round_to_bf16, source: str = "") -> list[str]:
    import ml_dtypes

    return _check_rounding(round_to_bf16, 16, lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float32), "ml_dtypes")


def check_tf32(round_to_tf32, source: str = "") -> list[str]:
    return _check_rounding(round_to_tf32, 13, tf32_reference, "a float64 reference")


# --- 4.1 memory pool ---------------------------------------------------------------


def _pool_counters(pool_class) -> tuple[int, int]:
    """(pool_hits, pool_misses) of the profiler the pool counts with: the subject's, in the grader."""
    if isinstance(pool_class, channel.Proxy):
        hits, misses = pool_class._peer.request({"op": "service", "name": "pool_counters"})
        return int(hits), int(misses)
    from .. import profiler

    return profiler.counters.pool_hits, profiler.counters.pool_misses


def check_memory_pool(pool_class, source: str = "") -> list[str]:
    done = []
    device = FakeDevice(capacity=1 << 20)
    pool = pool_class(device.allocate)
    hits0, misses0 = _pool_counters(pool_class)
    a = pool.acquire(1024)
    if device.allocs != 1:
        fail(WRONG_RESULT, f"the first acquire(1024) should allocate once, allocated {device.allocs} times")
    pool.release(a, 1024)
    b = pool.acquire(1024)
    hits, misses = _pool_counters(pool_class)
    if b is not a or device.allocs != 1:
        fail(
            WRONG_RESULT, "acquire(1024) after release(a, 1024) should hand back the same allocation without allocating"
        )
    if (hits - hits0, misses - misses0) != (1, 1):
        fail(WRONG_RESULT, f"counters: want pool_hits=1, pool_misses=1, got {hits - hits0}, {misses - misses0}")
    done.append("a released allocation is reused for the same size; hits and misses counted")
    d = pool.acquire(2048)
    if d is b or device.allocs != 2:
        fail(WRONG_RESULT, "acquire(2048) must not be served by a cached 1024-byte allocation")
    pool.release(b, 1024)
    pool.release(d, 2048)
    if pool.cached_bytes() != 3072:
        fail(WRONG_RESULT, f"cached_bytes() after releasing 1024 + 2048 bytes: want 3072, got {pool.cached_bytes()}")
    done.append("sizes are kept apart; cached_bytes() counts the free lists")
    live = pool.acquire(4096)
    pool.flush()
    if not (b.freed and d.freed) or live.freed or pool.cached_bytes() != 0:
        fail(WRONG_RESULT, "flush() must free every cached allocation (and only those), leaving the cache empty")
    done.append("flush() frees the cache, not what is in use")
    pool.release(live, 4096)

    device = FakeDevice(capacity=4096)
    pool = pool_class(device.allocate)
    first = pool.acquire(2048)
    pool.release(first, 2048)
    try:
        second = pool.acquire(3072)
    except MemoryError:
        fail(WRONG_RESULT, "out of memory with 2048 cached bytes: flush the cache and retry once before giving up")
    if not first.freed or second.nbytes != 3072:
        fail(WRONG_RESULT, "on out-of-memory the pool should flush its cache and allocate again")
    try:
        pool.acquire(4096)
    except MemoryError:
        pass
    else:
        fail(WRONG_RESULT, "a request the device cannot hold even after a flush must raise MemoryError")
    done.append("out of memory: flush and retry once, then raise MemoryError")

    rng = np.random.default_rng()
    device = FakeDevice(capacity=1 << 24)
    pool = pool_class(device.allocate)
    held: list[tuple[object, int]] = []
    for _ in range(500):
        if held and rng.random() < 0.5:
            allocation, size = held.pop(int(rng.integers(len(held))))
            pool.release(allocation, size)
        else:
            size = int(rng.choice([256, 512, 4096, 8192]))
            allocation = pool.acquire(size)
            if getattr(allocation, "freed", False) or allocation.nbytes != size:
                fail(WRONG_RESULT, f"acquire({size}) returned a freed or wrongly sized allocation {allocation!r}")
            if any(allocation is h for h, _ in held):
                fail(WRONG_RESULT, f"acquire({size}) returned an allocation that is still in use")
            held.append((allocation, size))
    in_use = sum(size for _, size in held)
    if device.used != in_use + pool.cached_bytes():
        fail(WRONG_RESULT, f"device bytes {device.used} != in use {in_use} + cached {pool.cached_bytes()}")
    done.append("500 random acquire/release calls: no allocation handed out twice, bytes add up")
    return done


# --- 5.1 timing: warm-up, sync, median -------------------------------------------


def _timing_kwargs(device: QueueingDevice, warmup: int, repeats: int) -> dict:
    """``time_median``'s keyword arguments (by name, as the exercise's signature has them)."""
    return {"warmup": warmup, "repeats": repeats, "sync": device.sync, "clock": device.clock}


def check_time_median(time_median, source: str = "") -> list[str]:
    done = []
    rng = np.random.default_rng()
    for warmup, repeats in ((3, 10), (0, 1), (2, 7)):
        # warm-up calls are slow (they compile): a timed warm-up, or a sample that starts
        # while one is still queued, shows up as a sample near one second
        timed = list(rng.uniform(1e-4, 1e-3, repeats))
        device = QueueingDevice([1.0] * warmup + timed)
        median, samples = call(
            f"time_median(warmup={warmup}, repeats={repeats})",
            time_median,
            device.launch,
            **_timing_kwargs(device, warmup, repeats),
        )
        samples = [float(x) for x in samples]
        calls = device.events.count("fn")
        if len(samples) != repeats or calls != warmup + repeats:
            reason = (
                BOUNDARY if abs(len(samples) - repeats) == 1 or abs(calls - warmup - repeats) == 1 else WRONG_RESULT
            )
            fail(reason, f"warmup={warmup}, repeats={repeats}: fn() called {calls} times, {len(samples)} samples")
        want = np.array(timed, dtype=np.float64) + QueueingDevice.HOST_S
        bad = ~np.isclose(samples, want, rtol=1e-9, atol=1e-12)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            hint = (
                "a sample includes queued warm-up work: sync() before starting the clock"
                if samples[i] > 0.5
                else "the sample stops before the work is done: sync() after fn(), before reading the clock"
                if samples[i] < want[i]
                else "each sample is sync(), clock(), fn(), sync(), clock()"
            )
            details = [f"sample {j}: got {samples[j]:.9f} s, want {want[j]:.9f} s" for j in np.flatnonzero(bad)[:5]]
            fail(WRONG_RESULT, f"warmup={warmup}, repeats={repeats}: {hint}", details)
        if not np.isclose(float(median), np.median(want), rtol=1e-9, atol=1e-12):
            fail(WRONG_RESULT, f"median {float(median)!r} s, want {np.median(want)!r} s (of {repeats} samples)")
    done.append("warm-up calls untimed; each sample drains the queue before and after; the samples in order")
    done.append("the median of odd and even counts, against numpy")
    for warmup, repeats in ((0, 0), (-1, 5), (3, -2)):
        device = QueueingDevice([])
        expect_value_error(
            f"warmup={warmup}, repeats={repeats}", time_median, device.launch, **_timing_kwargs(device, warmup, repeats)
        )
        if "fn" in device.events:
            fail(WRONG_RESULT, f"warmup={warmup}, repeats={repeats}: raise before calling fn()")
    done.append("repeats < 1 or warmup < 0 raise ValueError before anything runs")
    return done


# --- 14.1 the roofline bound of a matmul ---------------------------------------------


def check_matmul_roofline(matmul_roofline, source: str = "") -> list[str]:
    done = []
    rng = np.random.default_rng()
    shapes = [(64, 256, 784), (784, 256, 64), (64, 10, 128), (1024, 1024, 1024), (1, 1, 1), (4096, 4096, 4096)]
    shapes += [tuple(int(v) for v in rng.integers(1, 5000, 3)) for _ in range(40)]
    for M, N, K in shapes:
        peak, bandwidth = float(rng.uniform(1e3, 1e5)), float(rng.uniform(100, 5000))
        got = call(f"matmul_roofline({M}, {N}, {K}, ...)", matmul_roofline, M, N, K, peak, bandwidth)
        flops = 2.0 * M * N * K
        nbytes = 4.0 * (M * K + K * N + M * N)
        memory_roof = bandwidth * flops / nbytes
        want = {
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes,
            "bound_gflops": min(peak, memory_roof),
        }
        if not isinstance(got, dict) or set(got) != {*want, "limit"}:
            fail(WRONG_RESULT, f"return a dict with keys {sorted({*want, 'limit'})}, got {got!r}")
        for key, value in want.items():
            if not np.isclose(float(got[key]), value, rtol=1e-9):
                fail(
                    WRONG_RESULT,
                    f"{M}x{N}x{K} at {peak:.0f} GFLOP/s, {bandwidth:.0f} GB/s: {key} {got[key]!r}, want {value!r}",
                )
        limit = "memory" if memory_roof <= peak else "compute"
        if got["limit"] != limit:
            fail(WRONG_RESULT, f"{M}x{N}x{K}: limit {got['limit']!r}, want {limit!r} (memory roof {memory_roof:.0f})")
    done.append(f"{len(shapes)} shapes, MNIST and the blog's sizes included: flops, bytes, intensity, bound and limit")
    for args in (
        (0, 4, 4, 1e3, 1e3),
        (4, -1, 4, 1e3, 1e3),
        (4, 4, 2.5, 1e3, 1e3),
        (4, 4, 4, 0.0, 1e3),
        (4, 4, 4, 1e3, -5.0),
    ):
        expect_value_error(f"matmul_roofline{args}", matmul_roofline, *args)
    done.append("non-positive or non-integer dimensions and non-positive rates raise ValueError")
    return done


# --- 18.1 replaying a captured training step -------------------------------------------


def check_graphed_step(graphed_step_class, source: str = "") -> list[str]:
    rng = np.random.default_rng()
    features, epoch = 5, [8, 8, 8, 8, 5]  # full batches, then a shorter last one
    w0, w_true = rng.standard_normal(features), rng.standard_normal(features)
    batches = []
    for rows in epoch * 3:
        x = rng.standard_normal((rows, features))
        batches.append((x, x @ w_true + 0.1 * rng.standard_normal(rows)))

    def run(make_step):
        device = GraphDevice()
        body = TinyStep(device, w0)
        step = make_step(body, device)
        return [step(FakeArray(x.copy()), FakeArray(y.copy())) for x, y in batches], device, body

    want, _, ref = run(lambda body, device: lambda x, y: device.read(body(x, y)))  # eager, step by step
    try:
        got, device, body = run(graphed_step_class)
    except NotImplementedError:
        raise
    except CaptureError as exc:
        fail(WRONG_RESULT, str(exc))
    except Exception as exc:
        fail(EXCEPTION, f"{type(exc).__name__}: {exc}")
    shapes, replays = len(set(epoch)), len(batches) - len(set(epoch))
    if body.calls > 2 * shapes:
        fail(
            HOST_SIDE,
            f"the step ran through Python {body.calls} times for {len(batches)} batches of {shapes} shapes: "
            "run it eagerly and capture it once per shape, then replay the graph",
        )
    if not all(isinstance(v, float) for v in got):
        fail(WRONG_RESULT, f"return the loss as a Python float, got {type(got[0]).__name__}")
    bad = ~np.isclose(got, want, rtol=1e-12, atol=0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        eager = batches[first][0].shape not in {b[0].shape for b in batches[:first]}
        hint = (
            "the first batch of a shape runs eagerly on the static inputs and returns its loss"
            if eager
            else "a replay: copy the batch into the static inputs, launch the graph, then read the captured loss"
        )
        details = [
            f"batch {i} ({len(batches[i][1])} rows): got {got[i]!r}, want {want[i]!r}" for i in np.flatnonzero(bad)[:5]
        ]
        fail(WRONG_RESULT, f"{int(bad.sum())} of {len(batches)} losses differ from eager steps; {hint}", details)
    compare(body.w.data, ref.w.data, "the weights after the last step", atol=0, rtol=1e-12)
    if (device.calls["capture"], device.calls["graph_launch"]) != (shapes, replays):
        fail(
            WRONG_RESULT,
            f"{device.calls['capture']} captures and {device.calls['graph_launch']} graph launches; "
            f"want {shapes} and {replays}",
        )
    return [
        f"{len(batches)} batches of {shapes} shapes: the same losses and weights as eager steps",
        "one eager step (in a warm-up) and one capture per shape, every later batch a replay",
    ]


# --- dispatch ----------------------------------------------------------------------


def check_fib_tile(fib_tile, source: str = "") -> list[str]:
    from ..tile_eval.exercise import check_fib_tile as check  # chapter 20's check lives with its code

    return check(fib_tile, source)
