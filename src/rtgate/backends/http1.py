"""A small pooled HTTP/1.1 client for the passthrough's hot path.

Every request rtgate proxies to a named upstream pays the client's own cost before the
model's. httpx costs about half of a proxied request's CPU here (its connection pool checks
each pooled socket's state through anyio's typed attributes on every request; `rtgate bench
proxy`'s profile showed 40% of the process in it), so the passthrough uses this instead:
asyncio protocols with httptools' response parser (the parser uvicorn serves with), one
``transport.write`` per request, bodies handed over as they arrive.

What it does: keep-alive connections, at most ``size`` per upstream (callers past it wait in
a queue for one, each within its own deadline; in the server the queue is bounded by
``server.max_inflight``, the requests the front door lets in at once), TLS for ``https``,
``Content-Length`` and chunked bodies and bodies that end with the connection, back-pressure
(a reader that falls behind by more than :data:`HIGH_WATER` bytes pauses the socket), one
retry on a fresh connection when a pooled one turns out to be closed before any byte of the
answer came (the upstream closed it while idle). What it does not: proxies
(``HTTPS_PROXY``), redirects, HTTP/2, cookies.
The gate's own model calls (streamed completions for ``auto``) still go through httpx
(:class:`~rtgate.backends.openai_compat.OpenAICompatBackend`).

Errors: ``BackendUnavailable`` for refused or reset connections, malformed answers and a
connection lost mid-answer; ``TimeoutError`` for the connect timeout. A caller's deadline is
a cancellation: the connection in use is closed, never returned to the pool.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import cast
from urllib.parse import urlsplit

import httptools

from rtgate.core.errors import BackendUnavailable, InvalidRequest

__all__ = ["HIGH_WATER", "Http1Pool", "Http1Response"]

HIGH_WATER = 1 << 20  # bytes of unread body before the socket is paused
LOW_WATER = 1 << 18  # ... and resumed
_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"date", b"server"}
)  # not relayed: framing, and what the serving side writes itself


class _Stale(Exception):
    """A pooled connection was closed before any byte of the answer arrived."""


class Http1Response:
    """One answer: ``status`` and ``headers`` (lower-case names) once the head has come;
    the body through :meth:`read` or ``async for``. :meth:`close` when done (a complete
    answer on a keep-alive connection gives the connection back to its pool)."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_head",
        "_waiter",
        "closed",
        "got_bytes",
        "headers",
        "keep_alive",
        "status",
    )

    def __init__(self, conn: _Conn, head: asyncio.Future[None]) -> None:
        self._conn = conn
        self._head = head
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        self.got_bytes = False
        self.closed = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lower case), or ``None``."""
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def end_to_end_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers a proxy may relay (no hop-by-hop or framing ones)."""
        return [(k, v) for k, v in self.headers if k not in _HOP]

    @property
    def complete(self) -> bool:
        """The whole body has arrived."""
        return self._done

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = [chunk async for chunk in self]
        return b"".join(parts)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered < LOW_WATER:
                    self._conn.resume()
                yield chunk
                continue
            if self._error is not None:
                raise self._error
            if self._done:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Done with this answer: the connection goes back to the pool if the answer was
        read to its end and the upstream keeps the connection; else it is closed."""
        if self.closed:
            return
        self.closed = True
        self._conn.release(self._done and self.keep_alive and self._error is None)

    # --- fed by the connection ---------------------------------------------------------

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _headers_done(self, status: int, keep_alive: bool) -> None:
        self.status, self.keep_alive = status, keep_alive
        if not self._head.done():
            self._head.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER:
            self._conn.pause()
        self._wake()

    def _finish(self) -> None:
        self._done = True
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if self._done:
            return
        self._error = exc
        if not self._head.done():
            self._head.set_exception(exc)
        self._wake()


class _Conn(asyncio.Protocol):
    """One connection: its transport, its parser, the answer it is reading."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Http1Response | None = None
        self.lost = False
        self._paused = False
        self._forgotten = False

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        resp = self.response
        if resp is None:  # nothing was asked: an upstream that talks out of turn
            self.abort()
            return
        resp.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            resp._fail(BackendUnavailable(f"{self.pool.name}: malformed answer: {e}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        resp = self.response
        if resp is not None and not resp.complete:
            if not resp.got_bytes:
                resp._fail(_Stale())
            elif resp.status and resp.header(b"content-length") is None and not _chunked(resp):
                resp._finish()  # a body that ends with the connection
            else:
                why = f": {exc}" if exc else ""
                resp._fail(BackendUnavailable(f"{self.pool.name}: connection lost{why}"))
        self.pool._forget(self)

    # --- httptools callbacks -------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.response is not None:
            code = self.parser.get_status_code()
            self.response._headers_done(code, self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self.response is not None:
            self.response._finish()

    # --- the pool's side -----------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def send(self, payload: bytes) -> tuple[Http1Response, asyncio.Future[None]]:
        head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        resp = Http1Response(self, head)
        self.response = resp
        assert self.transport is not None
        self.transport.write(payload)
        return resp, head

    def release(self, reusable: bool) -> None:
        self.response = None
        self.resume()
        if reusable and self.usable:
            self.pool._give_back(self)
        else:
            self.abort()

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.lost:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.lost:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.abort()  # connection_lost follows, which forgets it
        elif self.transport is None:
            self.pool._forget(self)


def _chunked(resp: Http1Response) -> bool:
    te = resp.header(b"transfer-encoding")
    return te is not None and b"chunked" in te.lower()


class Http1Pool:
    """Keep-alive connections to the origin of ``base_url``, at most ``size`` at once.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``; request paths are relative to it.
        size: the most connections open at once (callers past it wait for one).
        connect_timeout_s: bound on opening a connection (TCP and TLS).
        headers: sent with every request (``Authorization``, ...).
        name: for error messages.
    """

    def __init__(
        self,
        base_url: str,
        *,
        size: int = 64,
        connect_timeout_s: float = 5.0,
        headers: Iterable[tuple[str, str]] = (),
        name: str = "upstream",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequest(f"base_url must be an http(s) URL, got {base_url!r}")
        if size < 1:
            raise InvalidRequest(f"size must be >= 1, got {size}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.size = size
        self.connect_timeout_s = connect_timeout_s
        self.name = name
        self._ssl = (ssl_context or ssl.create_default_context()) if self.tls else None
        default_port = (self.port == 443) if self.tls else (self.port == 80)
        host = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host and not default_port:  # an IPv6 literal
            host = f"[{self.host}]:{self.port}"
        lines = [f"Host: {host}", "User-Agent: rtgate", *(f"{k}: {v}" for k, v in headers)]
        self._static = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: list[_Conn] = []
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._count = 0  # connections open or opening
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open or opening."""
        return self._count

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Iterable[tuple[str, str]] = (),
    ) -> Http1Response:
        """Send one request (``path`` under the base URL's prefix); the answer once its head
        has arrived. The caller must :meth:`Http1Response.close` it."""
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + self._static
            + f"{extra}Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
        )
        payload = head + body
        for attempt in (0, 1):
            conn, reused = await self._acquire()
            try:
                resp, got_head = conn.send(payload)
                await got_head
                return resp
            except _Stale:
                conn.release(False)
                if reused and attempt == 0:
                    continue  # the upstream had closed it while idle: once more, fresh
                message = f"{self.name}: connection closed before an answer"
                raise BackendUnavailable(message) from None
            except BaseException:
                conn.release(False)
                raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the idle connections now and the busy ones when their answers end."""
        self._closed = True
        for conn in list(self._idle):
            conn.abort()
        self._idle.clear()
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_exception(BackendUnavailable(f"{self.name}: client closed"))

    # --- connections ---------------------------------------------------------------------

    async def _acquire(self) -> tuple[_Conn, bool]:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise BackendUnavailable(f"{self.name}: client closed")
            while self._idle:
                conn = self._idle.pop()  # the most recently used: the least likely stale
                if conn.usable:
                    return conn, True
            if self._count < self.size:
                self._count += 1
                try:
                    return await self._connect(loop), False
                except BaseException:
                    self._count -= 1
                    self._wake()
                    raise
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # it was handed a connection it will not use: pass it on
                else:
                    self._drop_waiter(waiter)
                raise

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Conn:
        conn = _Conn(self)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                transport, _ = await loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except TimeoutError:
            conn._forgotten = True
            raise TimeoutError(f"{self.name}: connect timed out") from None
        except OSError as e:
            conn._forgotten = True
            raise BackendUnavailable(f"{self.name}: {type(e).__name__}: {e}") from None
        conn.transport = transport
        return conn

    def _give_back(self, conn: _Conn) -> None:
        if self._closed:
            conn.abort()
            return
        self._idle.append(conn)
        self._wake()

    def _forget(self, conn: _Conn) -> None:
        if conn._forgotten:
            return
        conn._forgotten = True
        self._count -= 1
        if conn in self._idle:
            self._idle.remove(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _drop_waiter(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
