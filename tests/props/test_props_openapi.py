"""Schemathesis against the server's own OpenAPI schema: whatever a client sends, the answer
is never a 5xx, and every error has the ``{"error": {"code", "message"}}`` shape.

The server runs for real (uvicorn on a loopback port, its lifespan and gate started) with
the template tier only, so no model is loaded.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis")
uvicorn = pytest.importorskip("uvicorn")
server_app = pytest.importorskip("rtgate.server.app")

from rtgate.config.loader import load_config  # noqa: E402

pytestmark = pytest.mark.slow

TEMPLATES_ONLY = {"RTGATE_LOCAL_ENABLED": "false", "RTGATE_CLOUD_ENABLED": "false"}


@pytest.fixture(scope="module")
def rtgate_schema() -> Iterator[Any]:
    app = server_app.create_app(load_config(None, env=TEMPLATES_ONLY))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json")
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _check(case: Any) -> None:
    response = case.call(timeout=10)
    assert response.status_code < 500, f"{case.method} {case.path}: {response.text[:300]}"
    ctype = str((response.headers.get("content-type") or [""])[0])
    if response.status_code >= 400 and ctype.startswith("application/json"):
        err = response.json().get("error")
        assert isinstance(err, dict), response.text[:300]
        assert isinstance(err.get("code"), str) and isinstance(err.get("message"), str)


def test_no_request_gets_a_server_error(rtgate_schema: Any) -> None:
    # (schemathesis' pytest plugin does not run on pytest 9: drive each operation's
    # hypothesis strategy directly)
    operations = [op.ok() for op in rtgate_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/gate", "/v1/chat/completions"}
    for op in operations:

        @given(case=op.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            _check(case)

        run()
