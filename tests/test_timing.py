"""cuda/timing.py, the one event timer: what it records and divides, against a fake driver
whose events read a clock the test advances; on the CPU emulator, host times of real
launches; and the layering that lets the grader and the benchmark share it."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from minitorch_cuda.cuda import timing


class FakeDriver:
    """Events that record a clock in milliseconds; ``log`` keeps the order of what was done."""

    def __init__(self):
        self.now_ms, self.log = 0.0, []
        driver = self

        class Event:
            def record(self, stream=None):
                self.at = driver.now_ms
                driver.log.append("record")
                return self

            def synchronize(self):
                driver.log.append("synchronize")
                return self

            def time_since(self, start):
                driver.log.append("time_since")
                return self.at - start.at

        self.Event = Event


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    driver = FakeDriver()
    monkeypatch.setitem(sys.modules, "minitorch_cuda.cuda.driver", types.SimpleNamespace(drv=driver))
    return driver


def test_elapsed_ms_brackets_the_work_and_waits_for_the_second_event(fake):
    def work():
        fake.log.append("work")
        fake.now_ms += 2.5

    assert timing.elapsed_ms(work) == 2.5
    assert fake.log == ["record", "work", "record", "synchronize", "time_since"]


def test_seconds_per_call_is_the_median_per_call_after_an_untimed_warm_up(fake):
    costs_ms = iter([1000.0] + [1.0] * 4 + [3.0] * 4 + [2.0] * 4)  # the warm-up, then 3 samples of 4 calls

    def call():
        fake.now_ms += next(costs_ms)

    seconds = timing.seconds_per_call(call, repeats=3, inner=4)
    assert seconds == pytest.approx(statistics.median([1.0, 3.0, 2.0]) / 1e3)
    assert next(costs_ms, None) is None  # 1 + 3 x 4 calls, no more


def test_launcher_seconds_warms_up_with_one_launch_then_takes_the_median_of_inner_launch_samples():
    asked, samples_ms = [], iter([50.0, 4.0, 9.0, 5.0])

    def launch(timed):
        asked.append(timed)
        return next(samples_ms)  # a launcher returns the milliseconds of its ``timed`` launches

    assert timing.launcher_seconds(launch, 3) == pytest.approx(5.0 / 1e3)
    assert asked == [1, timing.INNER, timing.INNER, timing.INNER]


def _modules_added(module: str) -> set[str]:
    """The package's modules that importing ``module`` loads beyond ``minitorch_cuda`` itself."""
    code = (
        "import sys, minitorch_cuda\n"
        "before = set(sys.modules)\n"
        f"import {module}\n"
        "print(' '.join(sorted(m for m in set(sys.modules) - before if m.startswith('minitorch_cuda'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_timer_sits_below_its_users_and_the_grader_no_longer_imports_the_benchmark():
    assert _modules_added("minitorch_cuda.cuda.timing") <= {"minitorch_cuda.cuda", "minitorch_cuda.cuda.timing"}
    speed = _modules_added("minitorch_cuda.grade.speed")
    assert "minitorch_cuda.cuda.timing" in speed and "minitorch_cuda.bench" not in speed


@pytest.mark.gpu
@pytest.mark.emulated
def test_on_the_emulator_events_are_host_times_of_real_launches():
    from minitorch_cuda.cuda import backend, launchers
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.driver import EMULATED

    assert timing.elapsed_ms(lambda: time.sleep(0.05)) >= (50.0 if EMULATED else 0.0)
    n = 3000
    out = DeviceArray.empty((n,))
    seconds = timing.launcher_seconds(lambda timed: launchers.elementwise("ew_fill", n, out, 1.5, n, timed=timed), 2)
    assert 0 < seconds < 10
    np.testing.assert_array_equal(backend.to_numpy(out), np.full(n, 1.5, np.float32))
