"""A real ``rtgate serve`` on embedded defaults (the real local model), driven with the
official ``openai`` SDK: one non-streamed and one streamed chat completion, a few tokens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tee(pipe: IO[bytes], log: Path, ready: threading.Event) -> None:
    """Copy the server's output to ``log``; set ``ready`` when uvicorn says it started."""
    with log.open("wb") as out:
        for line in pipe:
            out.write(line)
            out.flush()
            if b"Application startup complete" in line:
                ready.set()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``python -m rtgate.cli.serve serve`` with no config at all."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTGATE_")}
    cmd = [sys.executable, "-m", "rtgate.cli.serve", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None
    ready = threading.Event()
    tee = threading.Thread(target=_tee, args=(proc.stdout, log, ready), daemon=True)
    tee.start()
    try:
        assert ready.wait(120), "server did not start:\n" + log.read_text()
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        proc.wait(20)
        tee.join(5)


def test_startup_says_the_cloud_tier_is_emulated(server: tuple[str, Path]) -> None:
    base, log = server
    health = httpx.get(base + "/healthz").json()
    assert health["warm"] is True and health["status"] == "ok"
    assert health["cloud"]["emulated"] is True
    assert {t["name"] for t in health["tiers"]} == {"cloud", "local", "template"}
    assert "cloud tier is EMULATED" in log.read_text()


def test_openai_sdk_non_streamed(server: tuple[str, Path]) -> None:
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)
    completion = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "What are your opening hours?"}],
        max_tokens=4,
        extra_headers={"X-Budget-Ms": "30000"},
    )
    text = completion.choices[0].message.content
    assert text and text.strip()
    extra = completion.model_extra or {}
    assert extra["rtgate"]["route"] in ("cloud", "local")  # a real model answered
    assert completion.choices[0].finish_reason in ("stop", "length")


def test_openai_sdk_streamed(server: tuple[str, Path]) -> None:
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "Can I return an item?"}],
        max_tokens=4,
        stream=True,
        extra_body={"budget_ms": 30000},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    last = chunks[-1]
    assert last.choices[0].finish_reason in ("stop", "length")
    assert (last.model_extra or {})["rtgate"]["route"] in ("cloud", "local")
    metrics = httpx.get(server[0] + "/metrics").text
    assert "rtgate_requests_total" in metrics
