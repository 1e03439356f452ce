"""The narrow channel between the checker and a subject process (the student's Python).

Messages are length-framed JSON (4 bytes, big-endian, then UTF-8) over a pair of
pipes: no pickle, so nothing a subject sends can run code in the checker. Values
travel as plain data: None, bool, int, float, str, lists, tuples, dicts, numpy
arrays and scalars of a fixed set of dtypes. Anything else is shared as a
*handle*: the side that owns the object keeps it, the other side holds a proxy
whose calls and attribute reads come back over the channel. So the checker can
hand a fake device to a student's memory pool (every ``allocate`` is a call back
into the checker), and the subject can hand back the objects it made.

The checker shares only what its policy allows (instances of the grader's fakes
and the framework's classes, their bound methods and the checks' own lambdas),
never modules, classes or functions with globals; attribute names starting with
``_`` are refused but for a few dunders, and no attribute can be set. Whatever a
subject sends is data or a handle it was given: the checker's references and
comparisons stay out of its reach.

Either side may call the other while it is itself being called (a pool's
``acquire`` calls the device's ``allocate``): ``Peer.request`` serves incoming
requests until its own reply arrives.

A call's numpy arguments travel as copies. What the callee changed in them comes
back with the reply: the subject's side (the student's process) takes it into its
arrays, as a local call would; the checker's side never does (``private``): its
arrays are its references' inputs, and a subject must not reach them. It only
notes which arguments were changed (``changed_arguments``), for checks that
require the inputs left alone.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import json
import os
import re
import select
import time
from collections.abc import Callable, Iterator

import numpy as np

# the largest message a check exchanges is about 1 MB (19.1's 200,000 float32 values, in base64); a
# frame is decoded whole, and JSON of empty lists takes some 20 times its size: 32 MB keeps that small
MAX_MESSAGE = 32 << 20
DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
DTYPES |= {"float16", "float32", "float64"}
# dunders a proxy forwards (on the checker's objects they are the only names with "_" allowed)
DUNDERS = {
    "__call__",
    "__enter__",
    "__exit__",
    "__int__",
    "__float__",
    "__index__",
    "__len__",
    "__getitem__",
    "__bool__",
    "__neg__",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__matmul__",
    "__rmatmul__",
    "__pow__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
}


class SubjectGone(BaseException):  # noqa: N818 -- a BaseException: no check's `except Exception` swallows it
    """The other side died, hung past its deadline or broke the protocol."""

    def __init__(self, why: str, message: str):
        super().__init__(message)
        self.why, self.message = why, message


class RemoteError(Exception):
    """An exception raised on the other side, by a name this side has no class for."""


class ChannelRefused(Exception):
    """A request the policy does not allow (a private attribute, an object that cannot be shared)."""


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,60}$")
_remote_classes: dict[str, type] = {}


def exception_for(name: str, message: str, known: dict[str, type] | None = None) -> BaseException:
    """An exception of the named class: the side's own class where one is known, builtins' Exception
    subclasses, else a ``RemoteError`` subclass of that name."""
    if known and name in known:
        return known[name](message)
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(message)
    if not _NAME.match(name):
        name = "RemoteError"
    if name not in _remote_classes:
        _remote_classes[name] = type(name, (RemoteError,), {})
    return _remote_classes[name](message)


class Proxy:
    """An object of the other side. Attribute reads, calls and the forwarded dunders go over the channel."""

    __slots__ = ("_peer", "_hid", "__weakref__")

    def __init__(self, peer: Peer, hid: int):
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_hid", hid)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._peer.request({"op": "getattr", "obj": self._hid, "name": name})

    def __setattr__(self, name, value):
        raise AttributeError(f"{name}: objects of the other process cannot be changed through the channel")

    def __repr__(self) -> str:
        return f"<remote object {self._hid}>"

    def __exit__(self, exc_type, exc, tb):
        exc_info = None if exc is None else [type(exc).__name__, str(exc)[:500]]
        return self._peer.request({"op": "exit", "obj": self._hid, "exc": exc_info})


def _forward(name: str):
    def method(self, *args, **kwargs):
        return self._peer.request(
            {"op": "method", "obj": self._hid, "name": name, "args": args, "kwargs": kwargs}, mutable=args
        )

    method.__name__ = name
    return method


for _dunder in DUNDERS - {"__exit__"}:
    setattr(Proxy, _dunder, _forward(_dunder))


class Peer:
    """One end of the channel. ``shareable(obj)`` decides what this side may hand out as a handle;
    ``known`` maps exception names to this side's classes; ``deadline`` (monotonic seconds) bounds
    every wait for the other side."""

    def __init__(
        self,
        rfd: int,
        wfd: int,
        shareable=lambda obj: True,
        known: dict[str, type] | None = None,
        fatal: tuple[type, ...] = (),
        private: bool = True,
    ):
        self.rfd, self.wfd = rfd, wfd
        self.shareable, self.known = shareable, known or {}
        self.fatal = fatal  # exceptions of this side's own code that end the exchange instead of being answered
        self.policy_private = private
        self.services: dict[str, object] = {}  # op "service": named functions of this side
        self.deadline: float | None = None
        self.objects: dict[int, object] = {}  # handles this side gave out (kept alive)
        self.ids: dict[int, int] = {}  # id(obj) -> handle
        self.proxies: dict[int, Proxy] = {}  # the other side's handles -> one proxy each
        self.next_request = 0
        self.depth = 0
        self.last_changed: list[int] = []  # the arguments the other side changed in this side's last call
        # called where the other side hands over an object it never shared before (None: any may come):
        # a check whose rule is measured while a call runs takes plain data back, or the object's methods
        # would run the student's code later, outside the measure
        self.new_object: Callable[[], None] | None = None

    # --- framing ---------------------------------------------------------------------------

    def send(self, message: dict) -> None:
        data = json.dumps(message, allow_nan=True).encode()
        if len(data) > MAX_MESSAGE:
            raise ChannelRefused(f"a message of {len(data)} bytes is over the channel's limit")
        frame = len(data).to_bytes(4, "big") + data
        while frame:
            try:
                frame = frame[os.write(self.wfd, frame) :]
            except (BrokenPipeError, OSError) as exc:
                raise SubjectGone("crashed", f"the other process closed the channel ({exc})") from None

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                    raise SubjectGone("timeout", "no answer before the deadline (an endless loop or a hang?)")
            chunk = os.read(self.rfd, min(n, 1 << 20))
            if not chunk:
                raise SubjectGone("crashed", "the other process died or closed the channel")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self) -> dict:
        size = int.from_bytes(self._read(4), "big")
        if size > MAX_MESSAGE:
            raise SubjectGone("crashed", f"a message of {size} bytes: over the channel's limit")
        try:
            message = json.loads(self._read(size))
        except (ValueError, RecursionError) as exc:
            raise SubjectGone("crashed", f"a message that is not JSON ({type(exc).__name__})") from None
        if not isinstance(message, dict):
            raise SubjectGone("crashed", "a message that is not a JSON object")
        return message

    # --- values ----------------------------------------------------------------------------

    def encode(self, value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.generic) and value.dtype.name in DTYPES:
            return {"S": [value.dtype.name, base64.b64encode(value.tobytes()).decode()]}
        if isinstance(value, np.ndarray) and value.dtype.name in DTYPES:
            data = np.ascontiguousarray(value)
            return {"A": [value.dtype.name, list(value.shape), base64.b64encode(data.tobytes()).decode()]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, tuple):
            return {"T": [self.encode(v) for v in value]}
        if isinstance(value, dict):
            return {"D": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, Proxy) and value._peer is self:
            return {"R": value._hid}  # the other side's own object, handed back
        if not self.shareable(value):
            raise ChannelRefused(f"a {type(value).__name__} cannot be shared with the other process")
        hid = self.ids.get(id(value))
        if hid is None:
            hid = len(self.objects) + 1
            self.objects[hid], self.ids[id(value)] = value, hid
        return {"H": hid}

    def decode(self, value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise SubjectGone("crashed", f"a value the protocol does not know: {str(value)[:80]}")
        ((tag, body),) = value.items()
        if tag == "H" and self.new_object is not None and body not in self.proxies:
            self.new_object()
        try:
            if tag == "T":
                return tuple(self.decode(v) for v in body)
            if tag == "D":
                return {self.decode(k): self.decode(v) for k, v in body}
            if tag in ("A", "S"):
                dtype = body[0]
                if dtype not in DTYPES:
                    raise ValueError(f"dtype {dtype!r}")
                raw = base64.b64decode(body[-1])
                if tag == "S":
                    return np.frombuffer(raw, dtype=dtype)[0]
                return np.frombuffer(raw, dtype=dtype).reshape([int(n) for n in body[1]]).copy()
            if tag == "R":
                return self.objects[int(body)]
            if tag == "H":
                hid = int(body)
                if hid not in self.proxies:
                    self.proxies[hid] = Proxy(self, hid)
                return self.proxies[hid]
        except SubjectGone:
            raise
        except Exception as exc:
            raise SubjectGone("crashed", f"a malformed {tag!r} value ({type(exc).__name__}: {exc})") from None
        raise SubjectGone("crashed", f"a value tagged {tag!r}")

    # --- requests --------------------------------------------------------------------------

    def request(self, message: dict, mutable=()):
        """Send a request, serve the other side's requests until its reply comes, return or raise it.
        ``mutable``: this side's arguments; numpy arrays the other side changed are noted in
        ``last_changed`` and, on the subject's side only, updated in place."""
        self.next_request += 1
        number = self.next_request
        body = dict(message, id=number)
        for key in ("args", "kwargs"):
            if key in body:
                body[key] = self.encode(body[key])
        self.send(body)
        while True:
            incoming = self.receive()
            if "reply" not in incoming:
                self.serve_one(incoming)
                continue
            if incoming.get("reply") != number:
                raise SubjectGone("crashed", "a reply to a request that was not made")
            changed = []
            for index, array in incoming.get("mutated", []) if isinstance(incoming.get("mutated"), list) else []:
                if isinstance(index, int) and 0 <= index < len(mutable) and isinstance(mutable[index], np.ndarray):
                    changed.append(index)
                    if self.policy_private:  # the checker's arrays stay as the checker made them
                        continue
                    new = self.decode_value(array)
                    if isinstance(new, np.ndarray) and new.shape == mutable[index].shape:
                        np.copyto(mutable[index], new, casting="unsafe")
            self.last_changed = changed
            if "error" in incoming:
                error = incoming["error"]
                name, text = error if isinstance(error, list) and len(error) == 2 else ("RemoteError", "")
                raise exception_for(str(name), str(text), self.known)
            return self.decode_value(incoming.get("value"))

    def decode_value(self, value):
        try:
            return self.decode(value)
        except RecursionError:
            raise SubjectGone("crashed", "a value nested too deeply") from None

    def serve_one(self, message: dict) -> None:
        number = message.get("id")
        reply: dict = {"reply": number}
        self.depth += 1
        try:
            if self.depth > 200:
                raise RecursionError("calls nested more than 200 deep across the channel")
            value, mutated = self._perform(message)
            reply["value"] = self.encode(value)
            if mutated:
                reply["mutated"] = mutated
        except SubjectGone:
            raise
        except self.fatal:
            raise
        except BaseException as exc:  # a student's SystemExit is an answer too
            reply = {"reply": number, "error": [type(exc).__name__, str(exc)[:2000]]}
        finally:
            self.depth -= 1
        self.send(reply)

    def _target(self, message: dict):
        try:
            return self.objects[int(message["obj"])]
        except (KeyError, TypeError, ValueError):
            raise ChannelRefused("an object this process never shared") from None

    def _perform(self, message: dict):
        op = message.get("op")
        if op == "service":
            name = str(message.get("name"))
            if name not in self.services:
                raise ChannelRefused(f"no service {name!r}")
            return self.services[name](), None
        obj = self._target(message)
        if op == "getattr":
            name = str(message.get("name"))
            self.check_name(name)
            return getattr(obj, name), None
        if op == "exit":
            exc = message.get("exc")
            if exc is None:
                return bool(obj.__exit__(None, None, None)), None
            error = exception_for(str(exc[0]), str(exc[1]), self.known)
            return bool(obj.__exit__(type(error), error, None)), None
        if op in ("method", "call"):
            name = "__call__" if op == "call" else str(message.get("name"))
            if name not in DUNDERS:
                self.check_name(name)
            args = self.decode(message.get("args", {"T": []}))
            kwargs = self.decode(message.get("kwargs", {"D": []}))
            if (
                not isinstance(args, tuple)
                or not isinstance(kwargs, dict)
                or not all(isinstance(k, str) for k in kwargs)
            ):
                raise ChannelRefused("call arguments must be a tuple and a dict with string keys")
            before = [a.copy() if isinstance(a, np.ndarray) else None for a in args]
            if name in DUNDERS:
                method = getattr(type(obj), name, None)
                if method is None and name == "__bool__":
                    return True, None
                if method is None:
                    raise TypeError(f"{type(obj).__name__} has no {name}")
                value = method(obj, *args, **kwargs)
            else:
                value = getattr(obj, name)(*args, **kwargs)
            mutated = [
                [i, self.encode(a)]
                for i, (a, b) in enumerate(zip(args, before))
                if b is not None and not np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            ]
            return value, mutated
        raise ChannelRefused(f"unknown request {op!r}")

    def check_name(self, name: str) -> None:
        """Refuse private attributes (the subject's side allows them: it is the student's process)."""
        if self.policy_private and name.startswith("_"):
            raise ChannelRefused(f"attribute {name!r} is not shared")

    def call(self, proxy: Proxy, *args, **kwargs):
        return self.request({"op": "call", "obj": proxy._hid, "args": args, "kwargs": kwargs}, mutable=args)


def subject_object(artifact) -> Proxy | None:
    """The subject's object a check was given: the artifact itself, or the first of the pair a
    launched exercise hands over (its function, the grader's launch of its kernel); None in a
    notebook, where the check gets the student's own object."""
    if isinstance(artifact, (tuple, list)) and artifact:
        artifact = artifact[0]
    return artifact if isinstance(artifact, Proxy) else None


def changed_arguments(artifact) -> list[int]:
    """The positions of the numpy arguments that the last call through ``artifact`` (a proxy) changed
    in the other process; [] for this process's own objects (a notebook's check compares its arrays)."""
    return list(artifact._peer.last_changed) if isinstance(artifact, Proxy) else []


@contextlib.contextmanager
def offered(artifact, name: str, function) -> Iterator[None]:
    """Offer ``function`` (no arguments) as the service ``name`` to the process behind the proxy
    ``artifact`` for the block; nothing where ``artifact`` is this process's own (a notebook's check)."""
    peer = artifact._peer if isinstance(artifact, Proxy) else None
    if peer is not None:
        peer.services[name] = function
    try:
        yield
    finally:
        if peer is not None:
            peer.services.pop(name, None)
