"""Running the fake server: in the foreground (the CLI) or on a background thread (tests).

::

    with FakeLLMServer(FakeLLMConfig(plan=parse_plan("ok=0.8,500=0.2"))) as fake:
        backend = OpenAICompatBackend(fake.base_url, "fake")
        ...
        fake.stats()  # {"requests": ..., "by_mode": {...}, "in_flight": ...}
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from rtgate.fakellm.app import create_app
from rtgate.fakellm.faults import FakeLLMConfig
from rtgate.fakellm.play import FakeLLMState

__all__ = ["FakeLLMServer", "serve"]


def _config(app: Any, *, log_level: str = "warning", log_config: Any = None) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=log_level,
        log_config=log_config,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        limit_concurrency=1000,  # past it, 503: hung connections cannot pile up for ever
    )


def serve(
    config: FakeLLMConfig, host: str = "127.0.0.1", port: int = 8001, log_level: str = "info"
) -> None:
    """Serve until interrupted (Ctrl-C): hanging responses get one second to end."""
    cfg = _config(create_app(config), log_level=log_level, log_config=uvicorn.config.LOGGING_CONFIG)
    cfg.host, cfg.port = host, port
    uvicorn.Server(cfg).run()


class FakeLLMServer:
    """The fake server on ``host`` (a free port unless given) in a daemon thread.

    It leaves logging alone (no uvicorn log configuration) and stops within about a second.
    """

    def __init__(
        self, config: FakeLLMConfig | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.app = create_app(config)
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(_config(self.app))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client calls ``base_url``."""
        return f"{self.url}/v1"

    @property
    def state(self) -> FakeLLMState:
        state: FakeLLMState = self.app.state.fake
        return state

    def stats(self) -> dict[str, Any]:
        return self.state.stats()

    def start(self, timeout_s: float = 10.0) -> FakeLLMServer:
        self._sock.listen(128)  # connections queue from now on, even before uvicorn runs
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name=f"fake-llm:{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake-llm server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sock.close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
