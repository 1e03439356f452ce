"""Chapter 2's explorer computes in the browser: its JavaScript encoder, run
under node, must store every value exactly as ml_dtypes (and, for TF32, the
framework's rounding) does, bits included."""

from __future__ import annotations

import json
import subprocess

import ml_dtypes
import numpy as np
from conftest import needs_node

from minitorch_cuda import numerics
from minitorch_cuda.book import fp_explorer

pytestmark = needs_node

FORMATS = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
RUNNER = """
const F = require(process.argv[1]);
const [names, values] = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = {};
for (const n of names) out[n] = values.map(v => {
  const q = F.encode(F.parse(v), F.byName(n));
  return q.sign + q.exponent + q.fraction;
});
process.stdout.write(JSON.stringify(out));
"""


def _values() -> list[float]:
    rng = np.random.default_rng(7)
    spread = rng.standard_normal(300) * np.exp2(rng.integers(-30, 30, 300))
    special = [0.0, -0.0, 0.1, 1.5, 3.0, 0.75, 65504, 65520, 448, 464, 1e-40, 3.0e38, 2.0**-127, 2.0**-130]
    special += [2.0**127 * 1.4, 2.0**127 * 1.5, 1e300, -1e-300, 5e-324, 6.0, 6.5, 7.75, 28.5, 57344, 61440]
    ties = [1 + 2.0**-24, 1 + 3 * 2.0**-24, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.25, 2.75, 0.375, 1.0625]
    return [float(v) for v in [*special, *ties, *spread, *(-spread[:50])]]


def _encode_in_js(names: list[str], values: list[float]) -> dict[str, list[str]]:
    done = subprocess.run(
        ["node", "-e", RUNNER, str(fp_explorer.JS)],
        input=json.dumps([names, [repr(v) for v in values]]),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def _bits(value: float, dtype) -> str:
    dt = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        stored = np.array([value], dtype=np.float64).astype(dt)
    raw = int(stored.view(UINT[dt.itemsize])[0])
    if dt == np.dtype(ml_dtypes.float8_e8m0fnu):
        return format(raw, "08b")
    n_bits = {"float6_e3m2fn": 6, "float6_e2m3fn": 6, "float4_e2m1fn": 4}.get(dt.name, dt.itemsize * 8)
    return format(raw & ((1 << n_bits) - 1), f"0{n_bits}b")


def _ml_dtypes_before(version: tuple[int, int]) -> bool:
    return tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) < version


def test_every_format_stores_what_ml_dtypes_stores():
    values = _values()
    js = _encode_in_js(list(FORMATS), values)
    for name, dtype in FORMATS.items():
        pairs = list(zip(values, js[name]))
        if name == "float8_e8m0fnu" and _ml_dtypes_before((0, 7)):
            # before 0.7, ml_dtypes stored a positive value that float32 rounds to 0 as NaN, not the smallest scale
            pairs = [(v, got) for v, got in pairs if not (v > 0 and np.float32(v) == 0)]
        wrong = [(v, got, _bits(v, dtype)) for v, got in pairs if got != _bits(v, dtype)]
        # ml_dtypes has no NaN in FP6/FP4 and stores one as -0, as the explorer does; numpy's NaN bits vary
        assert not wrong, f"{name}: {len(wrong)} values stored differently, first (value, js, ml_dtypes): {wrong[:3]}"


def test_tf32_rounds_like_the_framework():
    values = [v for v in _values() if abs(v) < 3e38 and (v == 0 or abs(v) > 1.2e-38)]
    x32 = np.array(values, dtype=np.float32).astype(np.float64)  # TF32 reads float32 inputs
    js = _encode_in_js(["tf32"], [float(v) for v in x32])["tf32"]
    ref = numerics.tf32_reference(x32.astype(np.float32))
    for v, bits, r in zip(x32, js, ref):
        sign, exponent, fraction = bits[0], bits[1:9], bits[9:]
        decoded = (-1) ** int(sign) * (1 + int(fraction, 2) / 2**10) * 2.0 ** (int(exponent, 2) - 127)
        assert decoded == float(r) or (v == 0 and float(r) == 0), (v, bits, r)


def test_mx_block_scale_follows_the_largest_value():
    done = subprocess.run(
        [
            "node",
            "-e",
            "const F = require(process.argv[1]);"
            "console.log(JSON.stringify(F.mxBlock([0.5, -12.5, 0.01], 'float4_e2m1fn')))",
            str(fp_explorer.JS),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    block = json.loads(done.stdout)
    # floor(log2 12.5) = 3, FP4's largest normal is 1.5 * 2^2: the scale is 2^(3-2)
    assert block["k"] == 1 and block["scaleBits"] == format(128, "08b")
    assert [r["decoded"] for r in block["rows"]] == [0.0, -12.0, 0.0]


def test_the_explorer_displays_as_html_with_its_script():
    shown = fp_explorer.FloatExplorer(0.1)._repr_html_()
    assert "<script>" in shown and "FPX.render" in shown and "fpx-root" in shown
    assert "FloatExplorer(value=0.1" in repr(fp_explorer.FloatExplorer(0.1))
