"""The load generator of ``rtgate bench burst``, in a process of its own.

``python -m rtgate.bench.burst_client URL_HOST PORT SPEC_JSON`` opens ``concurrency``
keep-alive connections first (not timed), then, every ``interval_s``, writes one request on
each of them at once (a wave) and reads every answer. Each answer is printed as one JSON line:
``{"wave", "status", "client_ms", "server_ms", "route", "degraded"}``; ``client_ms`` runs
from the moment the wave's requests were written to the last byte of the answer.
Plain asyncio streams with hand-written HTTP/1.1: the cheapest client Python has, so the
generator's own cost hides as little of the server's as it can.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

__all__ = ["main", "read_answer"]


def _request(host: str, port: int, body: bytes) -> bytes:
    head = (
        f"POST /v1/gate HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 answer with a ``Content-Length``: its status and body."""
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def _one(
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], payload: bytes, t0: float, wave: int
) -> dict[str, Any]:
    reader, writer = conn
    writer.write(payload)
    status, body = await read_answer(reader)
    out: dict[str, Any] = {"wave": wave, "status": status}
    out["client_ms"] = (time.perf_counter() - t0) * 1000.0
    try:
        parsed = json.loads(body)
        trace = parsed.get("trace") or {}
        out["server_ms"] = trace.get("elapsed_ms")
        out["route"] = parsed.get("route")
        out["degraded"] = trace.get("degraded")
        out["code"] = (parsed.get("error") or {}).get("code")
    except ValueError:
        out["route"] = None
    return out


async def _run(host: str, port: int, spec: dict[str, Any]) -> None:
    body = json.dumps({"input": spec["input"], "budget_ms": spec["budget_ms"]}).encode()
    payload = _request(host, port, body)
    conns = [await asyncio.open_connection(host, port) for _ in range(spec["concurrency"])]
    start = time.perf_counter()
    for wave in range(spec["waves"]):
        due = start + wave * spec["interval_s"]
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(_one(c, payload, t0, wave) for c in conns), return_exceptions=True
        )
        for r in results:
            line = r if isinstance(r, dict) else {"wave": wave, "status": 0, "error": repr(r)}
            sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    for _, writer in conns:
        writer.close()


def main() -> None:
    host, port, spec = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    asyncio.run(_run(host, port, spec))


if __name__ == "__main__":
    main()
