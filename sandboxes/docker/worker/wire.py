"""Transport of the sandbox worker: length-prefixed JSON frames on raw file descriptors (standard library only).

A frame is a 4-byte big-endian length and a UTF-8 JSON object. The host speaks the same
framing over the container's attach socket (:mod:`sandboxes.docker.channel`).
"""

import json
import os
import struct

LEN = struct.Struct(">I")
_LEN = LEN


def read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd):
    """One JSON frame from ``fd``, or None at end of file."""
    head = read_exact(fd, 4)
    if head is None:
        return None
    body = read_exact(fd, _LEN.unpack(head)[0])
    return None if body is None else json.loads(body)


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    write_all(fd, _LEN.pack(len(body)) + body)
