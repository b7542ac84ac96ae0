"""Transport of the docker backend: request/response frames over a container's hijacked stream.

The host writes a frame (4-byte big-endian length, UTF-8 JSON) to the worker's stdin and reads
its answer from stdout; the engine multiplexes stdout and stderr on the one stream with 8-byte
headers, which :class:`Channel` takes apart (the worker's own stderr is kept, the tail of it,
for diagnosing a failure). The worker's side of the framing is :mod:`sandboxes.docker.worker.wire`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

_LEN = struct.Struct(">I")
_DOCKER_FRAME = struct.Struct(">BxxxI")


class Channel:
    """Request/response framing over a hijacked docker stream (stdout frames demultiplexed)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._stdout = bytearray()
        self._next_id = 0
        self.log = bytearray()  #: the worker's own stderr (tail), for diagnosing a failure

    @classmethod
    async def open(cls, raw: Any) -> Channel:
        """A channel on the socket the docker SDK hijacked (``attach_socket`` or ``exec_start(socket=True)``)."""
        sock = getattr(raw, "_sock", raw)
        if not isinstance(sock, socket.socket):
            raise RuntimeError(
                f"the docker transport gave a {type(sock).__name__}, not a socket (TLS or ssh hosts "
                "are not supported by the docker sandbox; use the local unix socket)"
            )
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(reader, writer)

    async def _need(self, n: int) -> None:
        while len(self._stdout) < n:
            head = await self.reader.readexactly(_DOCKER_FRAME.size)
            kind, size = _DOCKER_FRAME.unpack(head)
            payload = await self.reader.readexactly(size)
            if kind == 2:
                self.log += payload
                del self.log[:-4000]
            else:
                self._stdout += payload

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read its answer (a mismatched answer means the stream is out of step)."""
        self._next_id += 1
        obj = {**obj, "id": self._next_id}
        body = json.dumps(obj).encode()
        self.writer.write(_LEN.pack(len(body)) + body)
        await self.writer.drain()
        await self._need(4)
        size = _LEN.unpack(self._stdout[:4])[0]
        await self._need(4 + size)
        frame = bytes(self._stdout[4 : 4 + size])
        del self._stdout[: 4 + size]
        answer = json.loads(frame)
        if answer.get("id") != obj["id"]:
            raise ValueError(f"the worker answered request {answer.get('id')} to request {obj['id']}")
        return answer

    def close(self) -> None:
        self.writer.close()
