"""Record what a GPU's tensor cores compute, for the CPU emulator's bit-exact test (about a minute).

    bash .ci/gpu_run.sh python .ci/mma_record.py        (on the GPU machine; $OUT: where to write)

Runs tests/data/mma_probe.cu (mma.sync TF32 m16n8k8 and BF16 m16n8k16, cvt.rna.tf32.f32, and
WMMA TF32 and BF16, one warp per tile) on the seeded inputs of tests/mma_probe.py (normal values,
a spread of exponents, cancellation, ties, subnormals, signed zeros) and writes them with the
results to $OUT/mma_recording.npz: commit it as tests/data/mma_recording.npz, and
tests/test_emulator_mma.py compares the emulator with it bit for bit.

Then it runs the same probe on the emulator (g++ here) under other accumulation rules
(emulator/tensor_core.h's EMU_MMA_ macros: extra alignment bits, products per step, the final
rounding, the exponent a product is aligned by) and writes how many elements of each probe differ
from the GPU's under each rule to $OUT/mma_rules.json, the default rule first: if the default
differs and another rule matches, that rule's numbers belong in tensor_core.h.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import mma_probe  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/mma_record"))
# A rule: the values of tensor_core.h's EMU_MMA_ macros. The default (the rule this script's first
# recording on an H200 pinned down, bit for bit) first, then its neighbours: one bit more or less,
# smaller or larger blocks, rounding to nearest, aligning products by their values.
KEYS = ("EXTRA_BITS", "TF32_BLOCK", "BF16_BLOCK", "WMMA_TF32_BLOCK", "ROUND_NEAREST", "ALIGN_BY_VALUE")
DEFAULT = (2, 8, 16, 4, 0, 0)
RULES = [DEFAULT] + [
    rule for extra, blocks, nearest, by_value in itertools.product(
        (1, 2, 3), ((8, 16, 4), (8, 16, 8), (4, 8, 4)), (0, 1), (0, 1))
    for rule in [(extra, *blocks, nearest, by_value)] if rule != DEFAULT
]  # fmt: skip


def differing(got: dict, want: dict) -> dict[str, int]:
    """Elements of each output whose bits differ (any NaN equals any NaN)."""
    counts = {}
    for key, g in got.items():
        w = want[key]
        same = g.view(np.uint32) == w.view(np.uint32)
        if g.dtype == np.float32:
            same |= np.isnan(g) & np.isnan(w)
        counts[key] = int((~same).sum())
    return counts


def main() -> int:
    import pycuda.autoinit  # noqa: F401
    import pycuda.compiler
    import pycuda.driver as cuda

    start = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    given = mma_probe.inputs()
    recorded = mma_probe.run(cuda, pycuda.compiler.SourceModule, given)
    device = cuda.Context.get_device()
    name = f"{device.name()} (sm_{''.join(map(str, device.compute_capability()))})"
    np.savez_compressed(OUT / "mma_recording.npz", device=name, **given, **recorded)
    print(f"recorded on {name} in {time.perf_counter() - start:.1f} s")

    from minitorch_cuda.emulator import compiler, driver

    driver.init()
    rules = []
    for rule in RULES:
        defines = [f"-DEMU_MMA_{key}={value}" for key, value in zip(KEYS, rule)]
        emulated = mma_probe.run(driver, compiler.SourceModule, given, defines)
        counts = differing(emulated, recorded)
        named = {key.lower(): value for key, value in zip(KEYS, rule)}
        rules.append(named | {"differing": counts, "total": sum(counts.values())})
        print(rules[-1])
    default = rules[0]
    best = min(rules, key=lambda r: r["total"])
    families = {}  # the default rule's differing tiles by family, per probe
    emulated = mma_probe.run(driver, compiler.SourceModule, given)
    for key, got in emulated.items():
        if got.ndim == 3:
            same = (got.view(np.uint32) == recorded[key].view(np.uint32)) | (np.isnan(got) & np.isnan(recorded[key]))
            tiles = np.unique(np.argwhere(~same)[:, 0])
            families[key] = sorted({mma_probe.family_of_tile(int(t)) for t in tiles})
    report = {"device": name, "seconds": round(time.perf_counter() - start, 1), "elements": {
        k: int(v.size) for k, v in recorded.items()}, "default": default, "best": best,
        "default_differs_in": families, "rules": rules}  # fmt: skip
    (OUT / "mma_rules.json").write_text(json.dumps(report, indent=1))
    print(f"default rule: {default['total']} elements differ; best: {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
