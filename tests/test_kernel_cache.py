"""kernel_cache.py, the one kernel cache folder: the runtime, the emulator's compiler and the
grader's sandboxes find their builds where the others put them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from minitorch_cuda import kernel_cache
from minitorch_cuda.grade import sandbox

WHERE = """
import json
from minitorch_cuda.cuda import runtime
from minitorch_cuda.emulator import toolchain
print(json.dumps({"runtime": str(runtime.CACHE_DIR), "emulator": str(toolchain.cache_dir())}))
"""


def _where(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", WHERE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_runtime_and_the_emulator_cache_in_the_folder_the_variable_names(tmp_path) -> None:
    env = {**os.environ, kernel_cache.ENV: str(tmp_path / "cache"), "MINITORCH_CUDA_EMULATE": "1"}
    assert _where(env) == {"runtime": str(tmp_path / "cache"), "emulator": str(tmp_path / "cache" / "emulator")}
    env = {k: v for k, v in env.items() if k != kernel_cache.ENV} | {"HOME": str(tmp_path / "home")}
    home_cache = tmp_path / "home" / ".cache" / "minitorch_cuda"
    assert _where(env) == {"runtime": str(home_cache), "emulator": str(home_cache / "emulator")}


def test_a_sandbox_finds_the_emulator_builds_it_was_seeded_with(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "grader-cache"))
    built = tmp_path / "grader-cache" / "emulator" / "runtime-abc.so"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"a build")
    work = tmp_path / "work"
    work.mkdir()
    sandbox.seed_emulator_cache(work)
    env = sandbox.environment(work) | {"MINITORCH_CUDA_EMULATE": "1", "PATH": os.environ["PATH"]}
    inside = Path(_where(env)["emulator"])
    assert inside.is_relative_to(work) and (inside / built.name).read_bytes() == b"a build"
