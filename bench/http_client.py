"""A minimal asyncio HTTP/1.1 client for the HTTP benchmark: thousands of SSE connections cheaply."""

from __future__ import annotations

import asyncio
import re
import time

TIMESTAMP = re.compile(rb'"delta":"(\d{19}) ')


class SSEConnection:
    """One GET (or POST) whose body is read with the chunked transfer framing removed."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.status = 0
        self.first_byte_at = 0.0
        self.chunked = False

    async def open(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> int:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        self.first_byte_at = time.perf_counter()
        self.status = int(head.split(b" ", 2)[1])
        self.chunked = b"transfer-encoding: chunked" in head.lower()
        return self.status

    async def read(self) -> bytes:
        """The next piece of the body (one HTTP chunk when the body is chunked); b"" at the end."""
        assert self.reader is not None
        if not self.chunked:
            return await self.reader.read(1 << 16)
        size_line = await self.reader.readline()
        if not size_line:
            return b""
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await self.reader.readline()
            return b""
        data = await self.reader.readexactly(size)
        await self.reader.readexactly(2)  # the CRLF after each chunk
        return data

    async def read_until(self, marker: bytes) -> bytes:
        assert self.reader is not None
        data = b""
        while marker not in data:
            piece = await self.read()
            if not piece:
                break
            data += piece
        return data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
