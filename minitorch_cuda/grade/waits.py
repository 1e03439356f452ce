"""Which framework calls made the host wait for the device in a block (12.1's count).

    with waits.named() as named:
        step()
    named["syncs"]  # {"mt.synchronize()": 1}; also "dtoh_copies", "htod_copies"

The counts are ``profiler``'s (the framework counts every sync and every copy);
this module only names them. A call is named where code outside the framework
enters it: the student's own code in a notebook, or, in the grader, the channel
that serves the subject process's requests (``Tensor.item()``, ``mt.synchronize()``
forwarded by the subject). ``sys.setprofile`` sees each entry and its return;
the counters' change across it, less that of entries nested inside, is that call's.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator

from .. import profiler

KINDS = ("syncs", "dtoh_copies", "htod_copies")


def _in_framework(frame) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module.split(".", 1)[0] == "minitorch_cuda" and not module.startswith("minitorch_cuda.grade")


def _name(frame) -> str:
    """``Tensor.item()``, ``mt.synchronize()``: a method by its class, a function by its module."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)  # Python 3.11 on; before, the class from ``self``
    if qualname is None:
        owner = frame.f_locals.get("self")
        qualname = code.co_name if owner is None else f"{type(owner).__name__}.{code.co_name}"
    if "." in qualname:
        return f"{qualname}()"
    module = frame.f_globals.get("__name__", "")
    return f"{'mt' if module == 'minitorch_cuda' else module.rsplit('.', 1)[-1]}.{qualname}()"


def _counts() -> dict[str, int]:
    return {kind: getattr(profiler.counters, kind) for kind in KINDS}


@contextlib.contextmanager
def named() -> Iterator[dict[str, Counter]]:
    """For the block: kind -> Counter of the calls that made the host wait (see the module's docstring)."""
    found: dict[str, Counter] = {kind: Counter() for kind in KINDS}
    entries: list[tuple[object, dict[str, int], Counter]] = []  # (frame, counts at entry, counts of nested entries)

    def watch(frame, event, arg):
        if event == "call" and _in_framework(frame) and (frame.f_back is None or not _in_framework(frame.f_back)):
            entries.append((frame, _counts(), Counter()))
        elif event == "return" and entries and entries[-1][0] is frame:
            _, before, nested = entries.pop()
            spent = Counter({kind: n - before[kind] for kind, n in _counts().items()})
            for kind in KINDS:
                if spent[kind] - nested[kind] > 0:
                    found[kind][_name(frame)] += spent[kind] - nested[kind]
            if entries:
                entries[-1][2].update(spent)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield found
    finally:
        sys.setprofile(previous)


def describe(calls: Counter, total: int) -> str:
    """``Tensor.numpy() ×1, Tensor.item() ×1``; what no call was named for (``total`` is the count) last."""
    parts = [f"{call} ×{n}" for call, n in calls.most_common()]
    unnamed = total - sum(calls.values())
    if unnamed > 0:
        parts.append(f"unnamed ×{unnamed}")
    return ", ".join(parts)
