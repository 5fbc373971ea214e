"""The passthrough's HTTP/1.1 client against real loopback servers that misbehave on cue,
on asyncio's loop and on uvloop's (the one ``rtgate serve`` runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from rtgate.backends.http1 import HIGH_WATER, Http1Pool
from rtgate.core.errors import BackendUnavailable, InvalidRequest

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[Any]], Any]:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def go(main: Awaitable[Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)  # type: ignore[arg-type]

    return go


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (Content-Length framed)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


async def settled(pool: Http1Pool) -> int:
    """The pool's open connections once an abort's ``connection_lost`` (a loop callback
    away) has run."""
    for _ in range(100):
        if not pool.open_connections:
            break
        await asyncio.sleep(0)
    return pool.open_connections


def answer(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: r-1\r\n"
    head += b"".join(h + b"\r\n" for h in extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


class Server:
    """A loopback server running ``handler`` per connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def echo_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        head, body = await read_request(reader)
        path = head.split(b" ")[1]
        writer.write(answer(path + b" " + body))
        await writer.drain()


def test_requests_reuse_one_keep_alive_connection(run: Any) -> None:
    async def main() -> None:
        server = Server(echo_forever)
        async with server as url:
            pool = Http1Pool(url, size=4, headers=[("Authorization", "Bearer k")])
            for i in range(3):
                resp = await pool.request("POST", "/chat/completions", b'{"i":%d}' % i)
                assert resp.status == 200
                assert await resp.read() == b'/v1/chat/completions {"i":%d}' % i
                assert resp.header(b"x-request-id") == b"r-1"
                names = {k for k, _ in resp.end_to_end_headers()}
                assert b"content-length" not in names and b"content-type" in names
                resp.close()
            assert server.connections == 1 and pool.idle_connections == 1
            await pool.aclose()

    run(main())


def test_the_pool_never_opens_more_than_its_size(run: Any) -> None:
    async def main() -> None:
        gate = asyncio.Event()
        two_in = asyncio.Event()
        arrived = 0

        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal arrived
            while True:
                await read_request(reader)
                arrived += 1
                if arrived == 2:
                    two_in.set()
                await gate.wait()
                writer.write(answer(b"{}"))
                await writer.drain()

        server = Server(held)
        async with server as url:
            pool = Http1Pool(url, size=2)

            async def one() -> int:
                resp = await pool.request("POST", "/x", b"{}")
                await resp.read()
                resp.close()
                return resp.status

            tasks = [asyncio.create_task(one()) for _ in range(5)]
            await two_in.wait()
            for _ in range(20):  # give a third connection every chance to open
                await asyncio.sleep(0)
            assert (
                pool.open_connections == 2 and arrived == 2
            )  # three callers wait for a connection
            gate.set()
            assert await asyncio.gather(*tasks) == [200] * 5
            assert server.connections == 2
            await pool.aclose()

    run(main())


def test_a_chunked_body_arrives_piece_by_piece(run: Any) -> None:
    async def main() -> None:
        step = asyncio.Event()

        async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"6\r\ndata:1\r\n")
            await writer.drain()
            await step.wait()  # the second piece only after the first was read
            writer.write(b"6\r\ndata:2\r\n0\r\n\r\n")
            await writer.drain()
            await read_request(reader)  # the connection is kept: a second request comes

        async with Server(sse) as url:
            pool = Http1Pool(url)
            resp = await pool.request("POST", "/s", b"{}")
            pieces = aiter(resp)
            assert await anext(pieces) == b"data:1"
            step.set()
            assert [p async for p in pieces] == [b"data:2"]
            assert resp.complete
            resp.close()
            assert pool.idle_connections == 1
            await pool.aclose()

    run(main())


def test_a_pooled_connection_closed_while_idle_is_retried_once_on_a_new_one(run: Any) -> None:
    async def main() -> None:
        async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(answer(b"ok"))
            await writer.drain()
            # then close: the pool still holds it as idle

        server = Server(once)
        async with server as url:
            pool = Http1Pool(url)
            first = await pool.request("POST", "/a", b"{}")
            assert await first.read() == b"ok"
            first.close()
            assert pool.idle_connections == 1
            second = await pool.request("POST", "/a", b"{}")
            assert await second.read() == b"ok"
            second.close()
            assert server.connections == 2
            await pool.aclose()

    run(main())


def test_a_connection_lost_mid_body_is_an_error_and_not_pooled(run: Any) -> None:
    async def main() -> None:
        async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
            await writer.drain()

        async with Server(cut) as url:
            pool = Http1Pool(url)
            resp = await pool.request("POST", "/a", b"{}")
            with pytest.raises(BackendUnavailable, match="connection lost"):
                await resp.read()
            resp.close()
            assert await settled(pool) == 0 and pool.idle_connections == 0
            await pool.aclose()

    run(main())


def test_a_body_that_ends_with_the_connection_is_whole(run: Any) -> None:
    async def main() -> None:
        async def close_framed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
            await writer.drain()

        async with Server(close_framed) as url:
            pool = Http1Pool(url)
            resp = await pool.request("POST", "/a", b"{}")
            assert await resp.read() == b"all of it"
            resp.close()
            assert pool.idle_connections == 0
            await pool.aclose()

    run(main())


def test_refused_and_malformed_answers_are_backend_unavailable(run: Any) -> None:
    async def main() -> None:
        async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
            await reader.read()

        async with Server(garbage) as url:
            pool = Http1Pool(url)
            with pytest.raises(BackendUnavailable, match="malformed"):
                await pool.request("POST", "/a", b"{}")
            assert await settled(pool) == 0
        closed = Http1Pool(url)  # the server is gone: nothing listens there now
        with pytest.raises(BackendUnavailable, match=r"Connect|refused"):
            await closed.request("POST", "/a", b"{}")
        assert closed.open_connections == 0

    run(main())


def test_a_cancelled_request_closes_its_connection(run: Any) -> None:
    async def main() -> None:
        arrived = asyncio.Event()

        async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            arrived.set()
            await reader.read()  # no answer, until the client closes

        async with Server(never) as url:
            pool = Http1Pool(url)
            task = asyncio.create_task(pool.request("POST", "/a", b"{}"))
            await arrived.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await settled(pool) == 0 and pool.idle_connections == 0

    run(main())


def test_a_reader_that_falls_behind_pauses_the_socket(run: Any) -> None:
    async def main() -> None:
        size = 3 * HIGH_WATER
        sent = asyncio.Event()

        async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            writer.write(b"x" * size)
            await writer.drain()
            sent.set()

        async with Server(big) as url:
            pool = Http1Pool(url)
            resp = await pool.request("POST", "/a", b"{}")
            for _ in range(200):  # let the bytes come in without reading them
                await asyncio.sleep(0)
            assert resp._buffered <= HIGH_WATER + (1 << 17)  # paused near the mark
            assert len(await resp.read()) == size
            resp.close()
            await pool.aclose()

    run(main())


def test_bad_base_urls_are_refused() -> None:
    with pytest.raises(InvalidRequest):
        Http1Pool("ftp://x/v1")
    with pytest.raises(InvalidRequest):
        Http1Pool("http://127.0.0.1:1/v1", size=0)
