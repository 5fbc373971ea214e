"""Shared real models and a real OpenAI-compatible server, loaded once per session."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from rtgate.backends.llamacpp import LlamaCppBackend
from rtgate.models.locate import locate_model


@pytest.fixture(scope="session")
def smollm2() -> Iterator[LlamaCppBackend]:
    """One SmolLM2 backend for the session (its worker thread is loop-agnostic)."""
    backend = LlamaCppBackend("smollm2", n_ctx=1024, queue_size=4)
    yield backend
    asyncio.run(backend.aclose())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m llama_cpp.server`` serving SmolLM2 on a free loopback port; its base URL."""
    log = tmp_path_factory.mktemp("llama_server") / "stderr.log"
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(locate_model("smollm2"))]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", "2"]
    cmd += ["--model_alias", "smollm2", "--verbose", "False"]
    err_file = log.open("wb")  # a file, not a pipe: nobody would drain a pipe
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    try:
        while True:  # readiness: poll /v1/models until the server answers
            if proc.poll() is not None:
                err = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {err}")
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not become ready in 60 s")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err_file.close()
