"""The ASGI application: :func:`create_app` wires the gate, the routers and the errors.

Other applications add their endpoints as FastAPI routers, three ways:

- ``create_app(config, extra_routers=[router])`` in code;
- ``[server] routers = ["package.module:router"]`` in the config (an ``APIRouter``, or a
  callable taking the :class:`~rtgate.config.loader.Config` and returning one);
- an entry point in the ``rtgate.routers`` group of an installed package (same shapes),
  found when ``server.discover_routers`` is true (the default).

A router that needs start-up work gives itself a ``lifespan``; it runs inside the app's,
so the gate is ready and ``get_state`` works. Endpoints reach the gate through the
:func:`~rtgate.server.state.get_state` dependency.

Around every request runs the security stack of :mod:`rtgate.server.middleware_stack` (error
shield, CORS, body limit, API keys), unless the caller passes its own ``middleware``.
At start-up, with Redis delegation, the replica loads and then keeps publishing the
fleet's learned latencies (:mod:`rtgate.server.fleet`).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from importlib.metadata import version as dist_version
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from rtgate.assembly.build import Assembly, assemble, warm_up
from rtgate.config.loader import Config
from rtgate.core.errors import ClientGone, ConfigError
from rtgate.core.heap import frozen_heap
from rtgate.gate import Gate
from rtgate.resilience.wire import resilience_snapshot
from rtgate.server import gate_api, openai_api, ws
from rtgate.server.arrival import WATCH
from rtgate.server.error_responses import install_error_handlers
from rtgate.server.fleet import shared_latency
from rtgate.server.middleware_stack import OPEN_NOTE, auth_mode, server_middleware
from rtgate.server.state import ServerState, state
from rtgate.server.streams import json_response

__all__ = ["ROUTER_GROUP", "create_app", "load_routers"]

log = logging.getLogger("rtgate.server")
ROUTER_GROUP = "rtgate.routers"
RouterSpec = APIRouter | Callable[[Config], APIRouter] | Callable[[], APIRouter]

ops = APIRouter(tags=["ops"])


def _version() -> str:
    try:
        return dist_version("rtgate")
    except Exception:
        return "0+unknown"


@ops.get("/healthz", summary="Liveness, warm state and what each tier is")
async def healthz(st: Annotated[ServerState, Depends(state)]) -> Response:
    asm, gate = st.assembly, st.gate
    snap = gate.snapshot()
    tiers = []
    for info in asm.tiers:
        entry: dict[str, Any] = info.to_dict()
        entry["warm"] = asm.warm.get(info.name, "not warmed")
        entry.update(snap["tiers"].get(info.name, {}))
        tiers.append(entry)
    failed = [n for n, s in asm.warm.items() if s != "ok"]
    cloud = next((t for t in asm.tiers if t.kind == asm.cloud_mode), None)  # the best one
    notes = [*asm.notes, OPEN_NOTE] if st.auth == "open" else list(asm.notes)
    body = {
        "status": "degraded" if failed else "ok",
        "version": _version(),
        "warm": gate.warm,
        "warmup_ms": asm.warmup_ms,
        "uptime_s": round(time.time() - st.started, 3),
        "pid": os.getpid(),  # which worker answered (rtgate serve --workers N)
        "cloud": {
            "mode": asm.cloud_mode,
            "emulated": asm.cloud_mode == "emulated",
            "label": cloud.label if cloud else None,
        },
        "tiers": tiers,
        "notes": notes,
        "auth": st.auth,
        "resilience": resilience_snapshot(gate),
        "delegation": {
            "backend": st.config.delegation.backend,
            "shared_latency": st.fleet,
        },
        "queue_depth": snap["queue_depth"],
        "jobs": gate.job_count,
        "overload": {
            "loop_behind_ms": round(WATCH.behind_ms(asyncio.get_running_loop().time()), 3),
            "refused": dict(WATCH.refused),
        },
    }
    return json_response(body)


ops.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)


@ops.get("/metrics", summary="Prometheus metrics of the gate")
async def metrics(st: Annotated[ServerState, Depends(state)]) -> Response:
    text = generate_latest(st.gate.metrics.registry) + _refusals()
    return Response(text, media_type=CONTENT_TYPE_LATEST)


def _refusals() -> bytes:
    """The overload refusals of this process (:data:`~rtgate.server.arrival.WATCH`), in the
    Prometheus text format: a counter by where the request was refused and why."""
    name = "rtgate_overload_refusals"
    lines = [
        f"# HELP {name}_total Answer requests refused at once because the server was behind "
        "or full",
        f"# TYPE {name}_total counter",
    ]
    for key, n in sorted(WATCH.refused.items()):
        where, why = key.split("_", 1)
        lines.append(f'{name}_total{{where="{where}",why="{why}"}} {n}')
    return ("\n".join(lines) + "\n").encode()


def _resolve(obj: Any, config: Config, where: str) -> APIRouter:
    if isinstance(obj, APIRouter):
        return obj
    if callable(obj):
        made = obj(config) if inspect.signature(obj).parameters else obj()
        if isinstance(made, APIRouter):
            return made
    raise ConfigError(f"{where}: expected an APIRouter or a function returning one")


def load_routers(config: Config) -> list[APIRouter]:
    """The routers named in ``server.routers`` and, if enabled, the installed entry points."""
    out: list[APIRouter] = []
    if config.server.discover_routers:
        for ep in entry_points(group=ROUTER_GROUP):
            out.append(_resolve(ep.load(), config, f"entry point {ep.name} ({ep.value})"))
    for spec in config.server.routers:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ConfigError(f"server.routers: {spec!r} is not 'package.module:attribute'")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"server.routers: cannot load {spec!r}: {e}") from e
        out.append(_resolve(obj, config, f"server.routers: {spec}"))
    return out


def _announce(asm: Assembly, auth: str) -> None:
    for info in asm.tiers:
        state = asm.warm.get(info.name, "not warmed")
        log.info(
            "tier %s (q=%d, %s): %s [%s]", info.name, info.quality, info.kind, info.label, state
        )
    for note in asm.notes:
        log.warning("%s", note)
    if auth == "open":
        log.warning("%s", OPEN_NOTE)
    else:
        log.info("API keys required on every route but the open paths")
    if asm.warmup_ms is not None:
        log.info("warm-up took %.0f ms", asm.warmup_ms)


def _gate_lifespan(
    config: Config, assembly: Assembly | None, gate: Gate | None, do_warmup: bool, auth: str
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: assemble (or adopt) the gate, warm it, share the fleet's learned
    latencies, and hold the :class:`ServerState` in ``app.state.rtgate`` while it runs."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        asm = assembly or (Assembly.of(gate) if gate is not None else assemble(config))
        try:
            async with asm.gate, shared_latency(config, asm.gate) as fleet:
                if do_warmup:
                    g = config.gate
                    await warm_up(asm, g.warmup_budget_ms, g.warmup_max_tokens)
                _announce(asm, auth)
                st = ServerState(config, asm, auth=auth, fleet=fleet)
                app.state.rtgate = st
                try:
                    yield
                finally:
                    app.state.rtgate = None
                    await st.aclose()
        finally:
            await asm.aclose_resources()

    return lifespan


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=499)  # nobody reads it: the client has left


def create_app(
    config: Config | None = None,
    *,
    assembly: Assembly | None = None,
    gate: Gate | None = None,
    extra_routers: Sequence[RouterSpec] = (),
    warmup: bool | None = None,
    freeze_gc: bool = False,
    watch_loop: bool = False,
    middleware: Sequence[Middleware] | None = None,
) -> FastAPI:
    """The rtgate server application.

    Args:
        config: settings (default: the embedded defaults, ``Config()``).
        assembly: a prebuilt gate and its description (else built from ``config`` at
            start-up); ``gate`` is a bare gate instead (tests, embedding).
        extra_routers: more routers to mount (``APIRouter`` or ``f(config) -> APIRouter``).
        middleware: ASGI middleware around everything, outermost first; default: the
            ``[security]`` stack (:func:`~rtgate.server.middleware_stack.server_middleware`: error
            shield, CORS, body limit, API keys). A list given here replaces it.
        warmup: warm every tier at start-up (default: ``config.gate.warmup``).
        freeze_gc: after start-up, move every object to the garbage collector's permanent
            generation (``gc.freeze``), so full collections stop rescanning the loaded
            libraries and models: fewer long pauses. For a dedicated server process.
        watch_loop: while serving, tick on the event loop (:class:`~rtgate.server.arrival.
            LoopWatch`) so a request read while the loop is behind is stamped from when the
            loop was last free. For a dedicated server process (one loop, real time).
    """
    config = config or Config()
    do_warmup = config.gate.warmup if warmup is None else warmup
    stack = server_middleware(config) if middleware is None else list(middleware)
    auth = auth_mode(stack)

    app = FastAPI(
        title="rtgate",
        version=_version(),
        summary="A latency-budget gate for language models",
        lifespan=_gate_lifespan(config, assembly, gate, do_warmup, auth),
        middleware=stack,
    )
    app.state.rtgate = None
    install_error_handlers(app)
    app.add_exception_handler(ClientGone, _client_gone)
    for router in (gate_api.router, openai_api.router, ws.router, ops):
        app.include_router(router)
    for spec in [*extra_routers, *load_routers(config)]:
        app.include_router(_resolve(spec, config, "extra router"))
    if freeze_gc:  # after every router's start-up too (theirs run inside the app's)
        app.router.lifespan_context = _frozen_after(app.router.lifespan_context)
    if watch_loop:
        lag = config.server.max_loop_lag_ms
        app.router.lifespan_context = _watched(app.router.lifespan_context, lag)
    return app


def _watched(inner: Any, shed_above_ms: float) -> Any:
    """``inner`` lifespan, with the process's :data:`~rtgate.server.arrival.WATCH` ticking
    on this loop while it serves, and the protocol refusing answer requests while the loop
    is more than ``shed_above_ms`` behind."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with inner(app) as state:
            WATCH.start(asyncio.get_running_loop())
            WATCH.shed_above_ms = shed_above_ms
            try:
                yield state
            finally:
                WATCH.shed_above_ms = None
                WATCH.stop()

    return lifespan


def _frozen_after(inner: Any) -> Any:
    """``inner`` lifespan, then the heap frozen (:func:`frozen_heap`) once everything has
    started."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with inner(app) as state:
            with frozen_heap():
                yield state

    return lifespan
