"""Access logging with redaction on: the access line is written, with secrets masked."""

from __future__ import annotations

import io
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from uvicorn.logging import AccessFormatter

from rtgate.security.redact import MASK, RedactingFilter


@pytest.fixture
def access_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s'))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("uvicorn.access")
    old = (logger.handlers[:], logger.propagate, logger.level)
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.handlers, logger.propagate = old[0], old[1]
    logger.setLevel(old[2])


def _access(logger: logging.Logger, path: str) -> None:
    # exactly how uvicorn's protocol logs a request
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", path, "1.1", 200)


def test_an_access_line_survives_the_filter(
    access_logger: tuple[logging.Logger, io.StringIO], capsys: pytest.CaptureFixture[str]
) -> None:
    logger, stream = access_logger
    _access(logger, "/healthz")
    assert stream.getvalue().strip() == '127.0.0.1:5000 - "GET /healthz HTTP/1.1" 200 OK'
    assert "Logging error" not in capsys.readouterr().err


def test_a_secret_in_the_path_is_masked_and_the_line_kept(
    access_logger: tuple[logging.Logger, io.StringIO], capsys: pytest.CaptureFixture[str]
) -> None:
    logger, stream = access_logger
    _access(logger, "/v1/gate?api_key=rtg_abcdefgh12345678&x=1")
    line = stream.getvalue().strip()
    assert line == f'127.0.0.1:5000 - "GET /v1/gate?api_key={MASK}&x=1 HTTP/1.1" 200 OK'
    assert "Logging error" not in capsys.readouterr().err


def test_a_secret_spanning_text_and_argument_is_folded() -> None:
    record = logging.LogRecord(
        "rtgate", logging.INFO, __file__, 1, "Bearer %s", ("abc123xyz",), None
    )
    RedactingFilter().filter(record)
    assert record.getMessage() == f"Bearer {MASK}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
def test_rtgate_serve_writes_access_lines(tmp_path: Path) -> None:
    port = _free_port()
    cfg = tmp_path / "rtgate.toml"
    cfg.write_text(
        f"[server]\nport = {port}\naccess_log = true\n"
        "[gate]\nwarmup = false\n[local]\nenabled = false\n[cloud]\nenabled = false\n",
        encoding="utf-8",
    )
    log = tmp_path / "server.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtgate", "serve", "--config", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:  # wait until it listens (a real server start, not a test sleep)
            try:
                httpx.get(f"{base}/healthz", timeout=1.0)
                break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        for _ in range(3):
            httpx.post(f"{base}/v1/gate?token=sk-abcdefghijklmnop1234", json={"input": "hi"})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "Logging error" not in text
    lines = [ln for ln in text.splitlines() if '"POST /v1/gate?token=' in ln]
    assert len(lines) == 3, text[-2000:]
    assert all(f"token={MASK}" in ln and "sk-abc" not in ln for ln in lines)
