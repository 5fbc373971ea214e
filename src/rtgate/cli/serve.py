"""``rtgate serve``: run the server on uvicorn (uvloop event loop, httptools parser).

Also runnable on its own: ``python -m rtgate.cli.serve serve --port 8000``.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from rtgate.config.loader import Config, load_config
from rtgate.core.errors import ConfigError

__all__ = ["app", "build_server", "run_server", "uvicorn_config"]

app = typer.Typer(help="The rtgate HTTP server.", no_args_is_help=True, add_completion=False)
err = Console(stderr=True)
_LEVELS = ("critical", "error", "warning", "info", "debug")


@app.callback()
def _main() -> None:
    """The rtgate HTTP server."""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _http_protocol() -> Any:
    """httptools with each request's arrival stamped (the budget counts from there)."""
    if not _has("httptools"):
        return "h11"
    from rtgate.server.arrival import StampedHttpTools

    return StampedHttpTools


def uvicorn_config(config: Config, application: Any) -> Any:
    """A ``uvicorn.Config`` for ``application`` with rtgate's choices."""
    import uvicorn

    s = config.server
    return uvicorn.Config(
        application,
        host=s.host,
        port=s.port,
        loop="uvloop" if _has("uvloop") else "asyncio",
        http=_http_protocol(),
        ws="websockets-sansio" if _has("websockets") else "auto",
        ws_max_size=s.max_body_bytes,
        lifespan="on",
        access_log=s.access_log,
        log_level=s.log_level,
        limit_concurrency=s.max_connections,
        timeout_graceful_shutdown=s.graceful_shutdown_s,
        server_header=False,
    )


def build_server(config: Config) -> Any:
    """A ``uvicorn.Server`` for ``config``, not started. The key store and the gate are
    built here, so a bad file or model fails before serving, clearly; log redaction is
    installed once uvicorn has configured logging (building ``uvicorn.Config`` does)."""
    import uvicorn

    from rtgate.assembly.build import assemble
    from rtgate.server.app import create_app
    from rtgate.server.middleware_stack import install_log_redaction, load_keys, server_middleware

    logging.basicConfig(
        level=config.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    middleware = server_middleware(config, load_keys(config))
    application = create_app(
        config,
        assembly=assemble(config),
        freeze_gc=True,
        watch_loop=True,
        middleware=middleware,
    )
    server = uvicorn.Server(uvicorn_config(config, application))
    install_log_redaction(config)
    return server


def run_server(config: Config, workers: int = 1) -> None:
    """Build the server (see :func:`build_server`), then serve until stopped; with
    ``workers`` > 1, that many processes on one listening socket (:func:`run_workers`)."""
    if workers > 1:
        run_workers(config, workers)
    else:
        build_server(config).run()


def check_workers(config: Config, workers: int) -> None:
    """Several workers need what a request may come back for shared between them: a job
    created by one worker is read from another (``GET /v1/jobs/{id}``), so delegated jobs
    must live on Redis or NATS. Learned latency is shared through Redis when delegation is
    there; metrics, rate limits and the answer cache (unless ``[cache] store = "redis"``)
    are per worker."""
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if workers > 1 and config.delegation.backend == "inprocess":
        raise ConfigError(
            "--workers > 1 needs delegated jobs shared between the workers: set "
            '[delegation] backend = "redis" (or "nats")'
        )


def run_workers(config: Config, workers: int) -> None:
    """``workers`` processes (spawned: nothing of this one's state is inherited), each on a
    listening socket of its own bound to the same address with ``SO_REUSEPORT``
    (:func:`reuseport_sockets`), so the kernel spreads new connections evenly over them.
    SIGTERM or SIGINT stops them all, and this waits for each."""
    import multiprocessing
    import signal

    listening = reuseport_sockets(config.server.host, config.server.port, workers)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(config, sock)) for sock in listening]
    for p in procs:
        p.start()
    for sock in listening:  # each worker has its own copy: a worker's exit closes its socket
        sock.close()

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.is_alive():
                p.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for p in procs:
        p.join()


def reuseport_sockets(host: str, port: int, n: int, backlog: int = 2048) -> list[socket.socket]:
    """``n`` listening TCP sockets on ``host``:``port`` with ``SO_REUSEPORT``: the kernel
    hashes each new connection to one of them. (One socket shared by every worker lets
    the worker that wakes first take most of a burst of connections: measured with 64
    keep-alive connections, one of two workers got all of them.) Port 0 binds the first
    to a free port and the others to the same one."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--workers > 1 needs SO_REUSEPORT (Linux, BSD, macOS)")
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    out: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(addr)
            addr = sock.getsockname()  # port 0: the port the first one got
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError as e:
        for sock in out:
            sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return out


def _worker(config: Config, listening: socket.socket) -> None:
    build_server(config).run(sockets=[listening])


@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML file (else $RTGATE_CONFIG).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Overrides server.host.")] = None,
    port: Annotated[int | None, typer.Option(help="Overrides server.port.")] = None,
    log_level: Annotated[str | None, typer.Option(help="Overrides server.log_level.")] = None,
    workers: Annotated[
        int, typer.Option(help="Processes on one socket (> 1 needs Redis or NATS delegation).")
    ] = 1,
) -> None:
    """Serve /v1/gate, /v1/chat/completions, /v1/ws, /v1/jobs, /metrics and /healthz."""
    try:
        cfg = load_config(config)
        if host is not None:
            cfg.server.host = host
        if port is not None:
            if not 0 <= port <= 65535:
                raise ConfigError(f"--port must be in 0..65535, got {port}")
            cfg.server.port = port
        if log_level is not None:
            if log_level.lower() not in _LEVELS:
                raise ConfigError(f"--log-level must be one of {', '.join(_LEVELS)}")
            cfg.server.log_level = log_level.lower()
        check_workers(cfg, workers)
        run_server(cfg, workers)
    except ConfigError as e:
        err.print(f"[bold red]configuration error:[/] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None


if __name__ == "__main__":
    app(sys.argv[1:])
