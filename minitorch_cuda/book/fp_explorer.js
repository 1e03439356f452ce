// The floating-point explorer of chapter 2, all of it in the browser: it works
// on the static book page (no kernel behind it) and in Jupyter alike.
// minitorch_cuda/book/fp_explorer.py wraps it; tests/test_fp_explorer.py runs
// the encoder under node against ml_dtypes.
//
// A format is {name, e, m, kind}: e exponent bits, m fraction bits, and kind
//   "ieee"   IEEE 754 pattern: all-ones exponent = infinity (fraction 0) or NaN
//   "fn"     E4M3: no infinity, one NaN pattern (all ones), overflow -> NaN
//   "finite" FP6/FP4: every pattern a number; overflow saturates at the maximum
//   "e8m0"   MX scale: no sign, no fraction, 2^(E-127); all ones = NaN
var FPX = (function () {
  "use strict";

  var FORMATS = [
    { name: "float64", e: 11, m: 52, kind: "ieee" },
    { name: "float32", e: 8, m: 23, kind: "ieee" },
    { name: "tf32", e: 8, m: 10, kind: "ieee", note: "tensor-core input; stored in 32 bits" },
    { name: "float16", e: 5, m: 10, kind: "ieee" },
    { name: "bfloat16", e: 8, m: 7, kind: "ieee" },
    { name: "float8_e5m2", e: 5, m: 2, kind: "ieee" },
    { name: "float8_e4m3fn", e: 4, m: 3, kind: "fn" },
    { name: "float6_e3m2fn", e: 3, m: 2, kind: "finite" },
    { name: "float6_e2m3fn", e: 2, m: 3, kind: "finite" },
    { name: "float4_e2m1fn", e: 2, m: 1, kind: "finite" },
    { name: "float8_e8m0fnu", e: 8, m: 0, kind: "e8m0", note: "MX block scale" },
  ];
  // The MX element formats and the exponent of their largest normal (OCP MX v1.0, table 1).
  var MX_ELEMENTS = { float8_e4m3fn: 8, float8_e5m2: 15, float6_e3m2fn: 4, float6_e2m3fn: 2, float4_e2m1fn: 2 };

  function byName(name) {
    for (var i = 0; i < FORMATS.length; i++) if (FORMATS[i].name === name) return FORMATS[i];
    throw new Error("unknown format " + name);
  }

  function pow2(k) {
    // exact for every k a float64 can hold, subnormals included
    if (k < -1022) return Math.pow(2, -1022) * Math.pow(2, k + 1022);
    return Math.pow(2, k);
  }

  function floorLog2(x) {
    // exact floor(log2(x)) for a positive finite x
    var k = Math.floor(Math.log2(x));
    while (pow2(k) > x) k--;
    while (pow2(k + 1) <= x) k++;
    return k;
  }

  function roundHalfEven(v) {
    var r = Math.floor(v);
    var d = v - r;
    if (d > 0.5 || (d === 0.5 && r % 2 !== 0)) r += 1;
    return r;
  }

  function maxFinite(f) {
    var bias = Math.pow(2, f.e - 1) - 1;
    if (f.kind === "e8m0") return pow2(127);
    if (f.kind === "ieee") return (2 - pow2(-f.m)) * pow2(bias);
    var top = Math.pow(2, f.e) - 1 - bias; // the all-ones exponent holds numbers too
    return (f.kind === "fn" ? 2 - pow2(1 - f.m) : 2 - pow2(-f.m)) * pow2(top);
  }

  function pad(n, width) {
    var s = n.toString(2);
    while (s.length < width) s = "0" + s;
    return s;
  }

  // Round x (a JS number, float64) into format f, round to nearest even as the
  // hardware does (E8M0: to the nearer power of two, ties up, as ml_dtypes).
  // Returns {sign, exponent, fraction (bit strings), value, kind}.
  function encode(x, f) {
    var bias = Math.pow(2, f.e - 1) - 1;
    var ones = pad(Math.pow(2, f.e) - 1, f.e);
    var zeros = pad(0, f.e);
    var fracOnes = f.m ? pad(Math.pow(2, f.m) - 1, f.m) : "";
    function out(sign, exponent, fraction, value, kind) {
      return { sign: f.kind === "e8m0" ? "" : sign, exponent: exponent, fraction: fraction, value: value, kind: kind };
    }
    var nan = function (sign) {
      if (f.kind === "e8m0") return out("", ones, "", NaN, "nan");
      if (f.kind === "fn") return out(sign, ones, fracOnes, NaN, "nan");
      if (f.kind === "finite") return out("1", zeros, pad(0, f.m), -0, "zero"); // no NaN: ml_dtypes stores -0
      return out(sign, ones, "1" + pad(0, f.m - 1), NaN, "nan");
    };
    var neg = x < 0 || (x === 0 && 1 / x < 0);
    var s = neg ? "1" : "0";
    if (Number.isNaN(x)) return nan("0");
    if (f.kind === "e8m0") {
      // no zero: any positive value below the smallest scale stores as it (ml_dtypes 0.7 on)
      if (!(x > 0) || !Number.isFinite(x)) return nan("");
      var k = floorLog2(x);
      var lo = pow2(k);
      if (x - lo >= lo / 2) k += 1; // nearer power of two, ties up
      if (k < -127) k = -127; // no zero: the smallest scale
      if (k > 127) return nan("");
      return out("", pad(k + 127, 8), "", pow2(k), "normal");
    }
    var a = Math.abs(x);
    var max = maxFinite(f);
    var overflow = function () {
      if (f.kind === "ieee") return out(s, ones, pad(0, f.m), neg ? -Infinity : Infinity, "inf");
      if (f.kind === "fn") return nan(s);
      var q = encode(neg ? -max : max, f); // saturate
      return q;
    };
    if (!Number.isFinite(a)) return overflow();
    var emin = 1 - bias;
    var q;
    if (a === 0) {
      q = 0;
    } else {
      var e = Math.max(floorLog2(a), emin);
      var step = pow2(e - f.m);
      q = roundHalfEven(a / step) * step;
    }
    if (q > max) return overflow();
    var value = neg ? -q : q;
    if (q === 0) return out(s, zeros, pad(0, f.m), value, "zero");
    if (q < pow2(emin)) return out(s, zeros, pad(q / pow2(emin - f.m), f.m), value, "subnormal");
    var k2 = floorLog2(q);
    var mant = (q / pow2(k2) - 1) * pow2(f.m);
    return out(s, pad(k2 + bias, f.e), f.m ? pad(mant, f.m) : "", value, "normal");
  }

  // MX block scaling (OCP MX v1.0, section 6.3): one E8M0 scale X = 2^k per block, with
  // k = floor(log2(max |v|)) - emax of the element format; each element stores v / X.
  function mxBlock(values, element) {
    var f = byName(element);
    var amax = 0;
    values.forEach(function (v) {
      if (Math.abs(v) > amax) amax = Math.abs(v);
    });
    var k = amax > 0 ? floorLog2(amax) - MX_ELEMENTS[element] : -127;
    k = Math.min(127, Math.max(-127, k));
    var scale = pow2(k);
    var rows = values.map(function (v) {
      var q = encode(v / scale, f);
      var plain = encode(v, f);
      return { value: v, scaled: v / scale, element: q, decoded: q.value * scale, plain: plain.value };
    });
    return { scale: scale, k: k, scaleBits: pad(k + 127, 8), rows: rows };
  }

  // ---------------------------------------------------------------- rendering

  function fmt(v) {
    if (Number.isNaN(v)) return "nan";
    if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
    if (v === 0) return 1 / v < 0 ? "-0" : "0";
    var s = v.toPrecision(10);
    if (s.indexOf("e") < 0 && s.indexOf(".") >= 0) s = s.replace(/0+$/, "").replace(/\.$/, "");
    else s = s.replace(/\.?0+e/, "e");
    return s;
  }

  function err(stored, x) {
    if (!Number.isFinite(stored) || !Number.isFinite(x)) return ["", ""];
    var abs = stored - x;
    return [abs.toPrecision(3), x !== 0 ? (abs / Math.abs(x)).toPrecision(3) : ""];
  }

  function bitsHtml(q) {
    // groups of 8 may break across lines, so float64 fits a narrow column
    var frac = q.fraction.replace(/(.{8})(?=.)/g, "$1<wbr>");
    return (
      "<code class='fpx-bits'><span class='fpx-s'>" + q.sign + "</span> <span class='fpx-e'>" + q.exponent +
      "</span> <span class='fpx-f'>" + frac + "</span></code>"
    );
  }

  var CSS =
    ".fpx{font-size:0.85em} .fpx table{border-collapse:collapse;margin:0.4em 0;width:100%}" +
    ".fpx td,.fpx th{padding:0.12em 0.45em;text-align:right;border-bottom:1px solid #ddd;vertical-align:top}" +
    ".fpx td:first-child,.fpx th:first-child{text-align:left} .fpx .fpx-bits{word-break:break-all;white-space:normal;background:none}" +
    ".fpx-s{color:#c62828} .fpx-e{color:#1565c0} .fpx-f{color:#2e7d32} .fpx input,.fpx select{font:inherit;margin:0 0.4em}" +
    ".fpx textarea{width:100%;font-family:monospace;font-size:0.95em} .fpx .fpx-note{color:#666;font-size:0.92em}" +
    ".fpx h4{margin:0.8em 0 0.2em;font-size:1.05em}";

  function parse(text) {
    var t = String(text).trim().toLowerCase();
    if (t === "nan") return NaN;
    if (t === "inf" || t === "+inf" || t === "infinity") return Infinity;
    if (t === "-inf" || t === "-infinity") return -Infinity;
    var v = Number(t);
    return t === "" ? NaN : v;
  }

  function formatsTable(x) {
    var rows = FORMATS.map(function (f) {
      var q = encode(x, f);
      var e = err(q.value, x);
      return (
        "<tr><td>" + f.name + (f.note ? "<br><span class='fpx-note'>" + f.note + "</span>" : "") + "</td><td style='text-align:left'>" +
        bitsHtml(q) + "</td><td>" + fmt(q.value) + "</td><td>" + q.kind + "</td><td>" + e[0] + "</td><td>" + e[1] + "</td></tr>"
      );
    });
    return (
      "<table><thead><tr><th>format</th><th style='text-align:left'>sign exponent fraction</th><th>stored value</th>" +
      "<th>kind</th><th>error</th><th>relative error</th></tr></thead><tbody>" + rows.join("") + "</tbody></table>"
    );
  }

  function mxTable(values, element) {
    var b = mxBlock(values, element);
    var worst = 0, worstPlain = 0, zeros = 0, zerosPlain = 0;
    var rows = b.rows.map(function (r) {
      var rel = r.value !== 0 ? Math.abs(r.decoded - r.value) / Math.abs(r.value) : 0;
      var relPlain = r.value !== 0 ? Math.abs(r.plain - r.value) / Math.abs(r.value) : 0;
      if (Number.isFinite(rel)) worst = Math.max(worst, rel);
      if (Number.isFinite(relPlain)) worstPlain = Math.max(worstPlain, relPlain); else worstPlain = Infinity;
      if (r.value !== 0 && r.decoded === 0) zeros++;
      if (r.value !== 0 && r.plain === 0) zerosPlain++;
      return (
        "<tr><td>" + fmt(r.value) + "</td><td>" + fmt(r.scaled) + "</td><td style='text-align:left'>" + bitsHtml(r.element) +
        "</td><td>" + fmt(r.decoded) + "</td><td>" + rel.toPrecision(2) + "</td><td>" + fmt(r.plain) + "</td></tr>"
      );
    });
    return (
      "<p>Shared scale X = 2<sup>" + b.k + "</sup> = " + fmt(b.scale) + ", stored as E8M0 <code class='fpx-bits'><span class='fpx-e'>" +
      b.scaleBits + "</span></code> (8 bits for the whole block of " + values.length + "). Largest relative error with the scale: <b>" +
      worst.toPrecision(2) + "</b>, values lost to zero: " + zeros + "; cast without a scale: " +
      (Number.isFinite(worstPlain) ? worstPlain.toPrecision(2) : "overflow") + ", lost to zero: " + zerosPlain + ".</p>" +
      "<table><thead><tr><th>value v</th><th>v / X</th><th style='text-align:left'>element bits</th><th>X × element</th>" +
      "<th>rel. error</th><th>cast without scale</th></tr></thead><tbody>" + rows.join("") + "</tbody></table>"
    );
  }

  // anywidget-style entry point: model has get(name), set(name, value), on("change:name", cb).
  function render(ctx) {
    var model = ctx.model, el = ctx.el;
    el.classList.add("fpx");
    var options = Object.keys(MX_ELEMENTS).map(function (n) {
      return "<option value='" + n + "'" + (n === model.get("element") ? " selected" : "") + ">" + n + "</option>";
    });
    el.innerHTML =
      "<style>" + CSS + "</style>" +
      "<label>value <input class='fpx-value' size='24' value='" + model.get("value") + "'></label>" +
      "<span class='fpx-note'>try 65504 and 65520, 448, 464 and 465, 1e-40, 3.0e38, 1.5, nan, -0</span>" +
      "<div class='fpx-formats'></div>" +
      "<h4>MX block scaling: 32 values share one power-of-two scale</h4>" +
      "<label>element format <select class='fpx-element'>" + options.join("") + "</select></label>" +
      "<textarea class='fpx-block' rows='3'>" + model.get("block").join(", ") + "</textarea>" +
      "<div class='fpx-mx'></div>";
    var input = el.querySelector(".fpx-value"), select = el.querySelector(".fpx-element");
    var area = el.querySelector(".fpx-block");
    function update() {
      el.querySelector(".fpx-formats").innerHTML = "<p>value = " + input.value + "</p>" + formatsTable(parse(input.value));
      var values = area.value.split(/[\s,;]+/).filter(function (t) { return t !== ""; }).map(parse);
      el.querySelector(".fpx-mx").innerHTML = values.length ? mxTable(values, select.value) : "";
    }
    input.addEventListener("input", function () { model.set("value", input.value); update(); });
    select.addEventListener("change", function () { model.set("element", select.value); update(); });
    area.addEventListener("input", update);
    update();
  }

  // A model for pages without a kernel: the state lives in the page.
  function staticModel(state) {
    return {
      get: function (k) { return state[k]; },
      set: function (k, v) { state[k] = v; },
      on: function () {},
      save_changes: function () {},
    };
  }

  return { FORMATS: FORMATS, MX_ELEMENTS: MX_ELEMENTS, encode: encode, byName: byName, mxBlock: mxBlock,
           render: render, staticModel: staticModel, parse: parse };
})();

if (typeof module !== "undefined") module.exports = FPX;
