"""Frames and plain values exchanged between the sandbox's processes.

Frames are a 4-byte big-endian length followed by UTF-8 JSON. Values are plain data only:
lists are JSON arrays; every other non-JSON-scalar is a one-key object whose key says the
type; anything else travels as an `Opaque` marker equal to nothing. The evaluator imports
this module too (`evals._sandbox_child.codec`); it uses the standard library only.
"""

import json
import numbers
import os
import select
import struct
import time

# Largest frame either side accepts by default (requests from the checker, job frames).
MAX_FRAME_BYTES = 16 << 20
# Largest frame the checker accepts from the candidate. A small JSON text decodes into far
# more memory (`[[],[],...]`: 3 bytes per list of 56 + 8 bytes, built twice by `json` and
# by `decode`), so this cap bounds the trusted checker's memory: about 45x, ~45 MiB.
MAX_RESPONSE_BYTES = 1 << 20
# Deepest nesting of containers the codec carries.
MAX_DEPTH = 100
# Longest message (exception text) kept in a verdict.
MAX_MESSAGE_CHARS = 500


class ProtocolError(Exception):
    """The candidate process sent something that is not a valid frame or value."""


# --------------------------------------------------------------------------------------
# Frames.


def write_frame(fd, obj, max_bytes=MAX_FRAME_BYTES):
    """Writes one length-prefixed JSON frame to a file descriptor."""
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(data) > max_bytes:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {max_bytes}")
    buf = memoryview(struct.pack(">I", len(data)) + data)
    while buf:
        n = os.write(fd, buf)
        buf = buf[n:]


def _read_exact(fd, n, deadline):
    """Reads exactly n bytes; None on EOF; TimeoutError past `deadline` (monotonic)."""
    chunks = []
    while n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("timed out")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError("timed out")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd, deadline=None, max_bytes=MAX_FRAME_BYTES):
    """Reads one frame; returns None on a clean EOF before the frame starts.

    The size is checked before anything is read or decoded, so a frame over `max_bytes`
    costs the reader nothing.
    """
    header = _read_exact(fd, 4, deadline)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds {max_bytes}")
    data = _read_exact(fd, size, deadline)
    if data is None:
        raise ProtocolError("truncated frame")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"invalid frame: {type(e).__name__}") from None
    except MemoryError:
        raise ProtocolError("frame too large to decode") from None


# --------------------------------------------------------------------------------------
# Values.


class Opaque:
    """Stands for a value the codec cannot carry; equal to nothing but itself."""

    __slots__ = ("type_name", "text")

    def __init__(self, type_name, text):
        self.type_name = type_name
        self.text = text

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<opaque {self.type_name}: {self.text}>"


def encode(value, depth=0):
    """Encodes a plain value as JSON-ready data; anything else becomes an Opaque marker."""
    if depth > MAX_DEPTH:
        return {"o": ["<too deep>", ""]}
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if -(1 << 53) < value < (1 << 53) else {"i": hex(value)}
    if t is float:
        return {"f": value.hex()}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if t is set:
        return {"s": [encode(v, depth + 1) for v in value]}
    if t is frozenset:
        return {"z": [encode(v, depth + 1) for v in value]}
    if t is bytes or t is bytearray:
        return {"b": bytes(value).hex()}
    if t is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    # Numeric types of other libraries (numpy scalars) compare like Python numbers.
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return encode(int(value), depth)
    if isinstance(value, numbers.Real):
        return encode(float(value), depth)
    return {"o": [t.__name__[:100], safe_repr(value)]}


def decode(data, depth=0):
    """Inverse of `encode`; raises ProtocolError on anything malformed."""
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("value nested too deeply")
    if data is None or isinstance(data, (bool, str)):
        return data
    if type(data) is int:
        return data
    if type(data) is float:  # Not produced by `encode`, but harmless.
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise ProtocolError("malformed value")
    ((tag, payload),) = data.items()
    try:
        if tag == "i":
            return int(payload, 16)
        if tag == "f":
            return float.fromhex(payload)
        if tag == "t":
            return tuple(decode(v, depth + 1) for v in _as_list(payload))
        if tag == "d":
            return {decode(k, depth + 1): decode(v, depth + 1)
                    for k, v in (_as_pair(p) for p in _as_list(payload))}
        if tag == "s":
            return {decode(v, depth + 1) for v in _as_list(payload)}
        if tag == "z":
            return frozenset(decode(v, depth + 1) for v in _as_list(payload))
        if tag == "b":
            return bytes.fromhex(payload)
        if tag == "c":
            real, imag = _as_pair(payload)
            return complex(float.fromhex(real), float.fromhex(imag))
        if tag == "o":
            type_name, text = _as_pair(payload)
            return Opaque(str(type_name)[:100], str(text)[:200])
    except ProtocolError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise ProtocolError(f"malformed value: {type(e).__name__}") from None
    raise ProtocolError(f"unknown value tag {tag[:20]!r}")


def _as_list(payload):
    if type(payload) is not list:
        raise ProtocolError("malformed value")
    return payload


def _as_pair(payload):
    if type(payload) is not list or len(payload) != 2:
        raise ProtocolError("malformed value")
    return payload


# --------------------------------------------------------------------------------------
# Text of hostile objects.


def safe_repr(value):
    try:
        return repr(value)[:200]
    except BaseException:  # noqa: BLE001 (hostile __repr__)
        return "<unrepresentable>"


def safe_str(exc):
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 (hostile __str__)
        text = "<unprintable>"
    return text[:MAX_MESSAGE_CHARS]


def exception_name(exc):
    try:
        name = type(exc).__name__
        return name if isinstance(name, str) else "Exception"
    except BaseException:  # noqa: BLE001
        return "Exception"
