"""Every message between the processes is a frame: a 4-byte size, then a list of strings (`pack`). The frames
between the supervisor and a warden are the NamedTuples below; both sides build and read them with these classes."""

import os
import struct
from typing import NamedTuple

from .answers import ANSWER_BYTES

HEADER = struct.Struct(">I")  # a frame: body size, then the body
COUNT = struct.Struct(">H")  # a body: field count, each field's size, then the UTF-8 fields
SIZE = struct.Struct(">I")
DETAIL_CHARS = 8192  # of a verdict's detail, and of the reprs of an answer and of what f returned
RUNNER_STATUSES = ("answer", "fail", "syntax", "error", "memory")  # a runner's reply: g's answer, or why none
READER_STATUSES = ("type", "error", "memory")  # a reader's reply: f's answer type, or why none
JUDGE_STATUSES = ("pass", "fail", "syntax", "error", "memory")  # a judge's reply
CALLER_STATUSES = ("returned", "syntax", "error", "memory")  # a caller's reply
ROLE_STATUSES = {
    b"runner": RUNNER_STATUSES,
    b"judge": JUDGE_STATUSES,
    b"caller": CALLER_STATUSES,
    b"reader": READER_STATUSES,
}
VERDICT_STATUSES = (*JUDGE_STATUSES, "timeout")  # a program's verdict: its judge's, or the warden's timeout
CALL_STATUSES = (*CALLER_STATUSES, "timeout")  # a call's verdict: its caller's, or the warden's timeout
# the sandbox's own fault, never the program's: the supervisor's verdict (no warden sends it) when a program's warden
# died, stopped answering or broke the protocol, and so did the fresh warden it was retried on
JUDGE_ERROR = "judge_error"


def pack(*fields: str | bytes) -> bytes:
    """One frame holding `fields`. Text that is not valid UTF-8 (lone surrogates) is escaped."""
    encoded = [field if type(field) is bytes else field.encode("utf-8", "backslashreplace") for field in fields]
    body = COUNT.pack(len(encoded)) + b"".join(SIZE.pack(len(part)) for part in encoded) + b"".join(encoded)
    return HEADER.pack(len(body)) + body


def unpack(body: bytes, decode: bool = True) -> list:
    """The fields of a frame's body (bytes unless `decode`); ValueError for a body that is not
    exactly such a list."""
    if len(body) < COUNT.size:
        raise ValueError("a frame shorter than its field count")
    (count,) = COUNT.unpack_from(body)
    offset = COUNT.size + count * SIZE.size
    if offset > len(body):
        raise ValueError("a frame shorter than its field sizes")
    sizes = [SIZE.unpack_from(body, COUNT.size + index * SIZE.size)[0] for index in range(count)]
    if offset + sum(sizes) != len(body):
        raise ValueError("a frame whose fields do not add up to its size")
    fields = []
    for size in sizes:
        field = body[offset : offset + size]
        fields.append(field.decode("utf-8", "replace") if decode else field)
        offset += size
    return fields


class FrameReader:
    """Cuts the bytes read from a pipe into frames; a frame over `limit` bytes is a ValueError
    as soon as its header arrives, before anything of it is buffered."""

    def __init__(self, limit: int, decode: bool = True):
        self.limit, self.decode, self.buffer = limit, decode, bytearray()

    def feed(self, chunk: bytes) -> list[list]:
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise ValueError(f"a frame of {size} bytes (at most {self.limit})")
            if len(self.buffer) < HEADER.size + size:
                break
            frames.append(unpack(bytes(self.buffer[HEADER.size : HEADER.size + size]), self.decode))
            del self.buffer[: HEADER.size + size]
        return frames


def read_frame(fd: int, limit: int, decode: bool = True) -> list | None:
    """The next frame from a blocking fd that only trusted code writes to; None at end of file."""
    reader = FrameReader(limit, decode)
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        frames = reader.feed(chunk)
        if frames:
            return frames[0]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


SLEEPING_SHARE = 0.25  # of a core: a program that used less, over its wall time, mostly sleeps


def sleeper_guard(timeout: float) -> float:
    """Wall seconds after which a program that mostly sleeps (under SLEEPING_SHARE of a core since it started) is
    stopped, where its clock is CPU time: twice its limit and half a second."""
    return 2 * timeout + 0.5


def wall_guard(timeout: float) -> float:
    """Wall seconds after which any program is stopped, where its clock is CPU time: ten times its limit and half a
    second. A program that computes while a loaded machine keeps it waiting for a core reaches its CPU limit first
    unless the machine is ten times oversubscribed, so its verdict does not depend on the load (at 2.5 s, a program
    of 0.4 s CPU timed out on a 2-core host running six busy processes). The supervisor waits this long, and a little
    more, for a verdict."""
    return 10 * timeout + 0.5


def frame_limit(output_chars: int) -> int:
    """The largest frame a warden or its children may send: an answer or a call's value (ASCII JSON of at
    most ANSWER_BYTES bytes), plus a verdict's detail, answer and returned reprs (DETAIL_CHARS each) and
    output (g's and f's together: output_chars + 200) at 6 bytes a character at worst (a lone surrogate
    travels as a backslash escape), plus 4096 bytes for the rest."""
    return ANSWER_BYTES + 6 * (output_chars + 200 + 3 * DETAIL_CHARS) + 4096


# The frames between the supervisor and a warden: the kind, then these fields (all text). Both sides
# build and read them with these classes. A warden also sends "pid" (its pid, as the supervisor sees it)
# and "fatal" (the traceback of a start-up failure).


class RunRequest(NamedTuple):
    """A "run" request: judge f(g()) for one program."""

    sequence: str  # the request's number, which its reply repeats
    f: str
    g: str
    answer_type: str  # a P3 answer type the judge checks, or "" for any JSON
    annotated: str  # "1": the answer type is f's first annotation (`answers.answer_type_of`), read by the warden


class ApplyRequest(NamedTuple):
    """An "apply" request: run a program, then call one of its functions."""

    sequence: str
    source: str
    function: str
    input: str  # JSON text


class ReadyReply(NamedTuple):
    """The "ready" reply: the warden has started and awaits requests."""

    level: str  # "full", "partial" or "basic"
    isolation: str  # how it isolates programs, in words
    exposure: str  # what a program can then do that it cannot under full isolation ("" under full isolation)


class VerdictReply(NamedTuple):
    """The "verdict" reply to a "run"."""

    sequence: str
    status: str  # one of VERDICT_STATUSES
    seconds: str  # repr of a float
    detail: str
    output: str
    answer: str  # repr of g's answer
    returned: str  # repr of what f returned for it


class ReturnedReply(NamedTuple):
    """The "returned" reply to an "apply"."""

    sequence: str
    status: str  # one of CALL_STATUSES
    seconds: str  # repr of a float
    detail: str
    output: str
    value: str  # JSON text of what the function returned; "" unless the status is "returned"
