"""Which GPU made a record, and that GPU's datasheet figures.

A page names its GPU from the record it shows, never by a literal, so that
re-recording on another card rewrites the text. Records name the device in
one of a few forms, as the tool that wrote them did: ``device.name`` (the
benchmark's device properties), ``device`` as a string, ``gpu`` as
"name, driver" (Nsight Compute records) or ``runs[i].device`` (the probes).

The figures are the vendor's, written once here: the peaks a chapter cites
beside what was measured ({cite}`nvidiah100` and {cite}`nvidiah200`, SXM
parts). What the driver reports (SMs, clocks, the L2 size) is in the record
itself and is read from there.
"""

from __future__ import annotations

# name as the driver reports it (its prefix) -> the datasheet figures
DATASHEET = {
    "NVIDIA H100": {
        "short": "H100",
        "memory": "HBM3",
        "memory_gb": 80,
        "dram_tb_s": 3.35,
        "fp32_tflop_s": 67,
        "tf32_tflop_s": 495,  # dense tensor-core TF32 (989 with sparsity)
        "citation": "nvidiah100",
    },
    "NVIDIA H200": {
        "short": "H200",
        "memory": "HBM3e",
        "memory_gb": 141,
        "dram_tb_s": 4.8,
        "fp32_tflop_s": 67,
        "tf32_tflop_s": 495,
        "citation": "nvidiah200",
    },
}


def device_name(record: dict) -> str:
    """The GPU that made ``record``, as the driver named it ("NVIDIA H100 80GB HBM3")."""
    found = record.get("device") or record.get("gpu")
    if isinstance(found, dict):
        found = found.get("name")
    if not found:
        found = next((run.get("device") for run in record.get("runs", []) if isinstance(run, dict)), None)
    if isinstance(found, dict):
        found = found.get("name")
    if not isinstance(found, str) or not found:
        raise ValueError(f"the record {record.get('command', '')!r} names no device (device, gpu or runs[].device)")
    return found.split(",")[0].strip()  # Nsight Compute's "name, driver version"


def datasheet(record_or_name: dict | str) -> dict:
    """The datasheet figures of the GPU that made a record (or of a device name)."""
    name = record_or_name if isinstance(record_or_name, str) else device_name(record_or_name)
    for prefix, figures in DATASHEET.items():
        if name.startswith(prefix):
            return {"name": name, **figures}
    known = ", ".join(DATASHEET)
    raise KeyError(f"no datasheet figures for {name!r} (known: {known}): add them to minitorch_cuda/book/devices.py")


def short_name(record: dict) -> str:
    """The GPU as prose names it: "H100", "H200"; a GPU without datasheet figures here (a
    reader's own, whose gpu cells re-made the record) by the driver's name."""
    name = device_name(record)
    try:
        return datasheet(name)["short"]
    except KeyError:
        return name.removeprefix("NVIDIA ").strip()
