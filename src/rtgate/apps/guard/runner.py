"""What ``rtgate guard run`` guarantees around the stop path, in pieces the command composes.

- Every stop topic and the status topic are checked before any audio is read
  (:func:`stop_topics`, :func:`status_topic`): a topic a client may not publish to is an
  :class:`InvalidRequest`, i.e. one line and exit 2.
- "No broker" means the first connection attempt did not succeed within the connect timeout
  (refused, unreachable, or no CONNACK in time). Without a fail-safe that is refused at start
  (:func:`connect`) unless the operator says otherwise: a stop would have nowhere to go.
- SIGTERM and SIGINT end the run like the end of the input (:class:`Shutdown`): the stops of
  the current tick are published first, then the status goes offline and the children end.
- A stop that neither reached the broker nor had a fail-safe run is reported at the end and
  the command exits with :data:`EXIT_UNDELIVERED`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from rtgate.apps.guard.mqtt import StopPublisher
from rtgate.apps.guard.pipeline import Guard, StopEvent
from rtgate.apps.guard.rules import Rules
from rtgate.apps.guard.topics import expand_topic
from rtgate.core.errors import InvalidRequest, RtgateError

if TYPE_CHECKING:  # the explainer is imported when a run starts it
    from rtgate.apps.guard.explain_child import ExplainConfig

__all__ = [
    "EXIT_UNDELIVERED",
    "Ended",
    "Shutdown",
    "connect",
    "guard_loop",
    "guard_until_done",
    "status_topic",
    "stop_topics",
]

EXIT_UNDELIVERED = 3
"""Exit code of ``guard run`` when a stop reached neither the broker nor a fail-safe."""


def stop_topics(rules: Rules, stations: Iterable[str]) -> dict[str, str]:
    """Each station's stop topic, expanded and checked (:class:`InvalidRequest`)."""
    return {s: rules.for_station(s).topic_for(s) for s in stations}


def status_topic(template: str, stations: list[str]) -> str | None:
    """The status topic for these stations (``{station}``: their names joined by commas),
    checked; None when ``template`` is empty (no status)."""
    if not template:
        return None
    return expand_topic(template, ",".join(stations), "status topic")


def connect(pub: StopPublisher, timeout_s: float, failsafe: bool, allow_no_failsafe: bool) -> bool:
    """Start ``pub`` and wait up to ``timeout_s`` for its first connection attempt.

    Returns whether it connected. Raises :class:`InvalidRequest` when it did not and there
    is no fail-safe, unless ``allow_no_failsafe`` (closing ``pub`` is the caller's part).
    """
    if pub.start(wait_s=timeout_s) or failsafe or allow_no_failsafe:
        return pub.connected
    where = f"{pub.broker.host}:{pub.broker.port}"
    raise InvalidRequest(
        f"broker {where} not reachable within {timeout_s:g} s and no --failsafe-cmd: a stop "
        "would reach nothing (give --failsafe-cmd, or --allow-no-failsafe to run anyway)"
    )


class Ended(BaseException):
    """Raised in the main thread by :class:`Shutdown` on SIGTERM or SIGINT (a
    ``BaseException``, like ``KeyboardInterrupt``, so ``except Exception`` lets it pass)."""


class Shutdown:
    """SIGTERM and SIGINT end the run: ``reason`` becomes ``terminated`` or ``interrupted``.

    The signal raises :class:`Ended` at once while the main thread waits for audio; during a
    tick (``deferred``) it waits until :meth:`check` so that the tick's stops are published;
    once ``closing`` it is ignored, so that the clean-up is not cut short. Handlers are
    installed only in the main thread (Python allows no other) and restored on exit.
    """

    _SIGNALS: ClassVar[dict[int, str]] = {
        signal.SIGTERM: "terminated",
        signal.SIGINT: "interrupted",
    }

    def __init__(self) -> None:
        self.reason = "closed"
        self.deferred = False
        self.closing = False
        self._pending = False
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> Shutdown:
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                self._saved[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, old in self._saved.items():
            signal.signal(sig, old)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.closing or self._pending:
            return
        self.reason = self._SIGNALS[signum]
        self._pending = True
        if not self.deferred:
            raise Ended(self.reason)

    def check(self) -> None:
        """Raise :class:`Ended` if a signal came during the tick that just finished."""
        if self._pending:
            raise Ended(self.reason)

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """A signal during the block waits for its end (a tick, a child's spawn), then
        ends the run (:meth:`check`); an error in the block goes on as it is."""
        self.deferred = True
        try:
            yield
        finally:
            self.deferred = False
        self.check()


def guard_loop(
    guard: Guard,
    windows: Iterable[tuple[Any, float, Any]],
    shutdown: Shutdown,
    on_stop: Callable[[StopEvent], None],
) -> None:
    """Feed ``windows`` to ``guard`` until they end or a signal comes; ``on_stop`` gets each
    stop after its tick (a signal during a tick waits for the tick's stops)."""
    for w, end_ts, rows in windows:
        with shutdown.deferring():
            for ev in guard.process(w, end_ts, rows):
                on_stop(ev)


def guard_until_done(
    guard: Guard,
    pub: StopPublisher,
    start: Callable[[], None],
    windows: Iterable[tuple[Any, float, Any]],
    cfg: ExplainConfig,
    shutdown: Shutdown,
    on_stop: Callable[[StopEvent], None],
) -> RtgateError | None:
    """Connect, start the explainer and guard until the input ends, a signal comes or an
    error; then, whatever happened: PUBACKs awaited (5 s), the status set offline with the
    reason, the explainer child ended. Returns the error that ended the run, if any."""
    from rtgate.apps.guard.explain_child import ExplainProcess

    worker = None
    try:
        start()
        # the stop path does not wait for the child; but a signal waits until it is spawned:
        # cut while the spawn writes the child's start-up data, the child would die on a
        # half-read pipe with a traceback (seen in the SIGTERM test, session 35)
        with shutdown.deferring():
            worker = ExplainProcess(cfg).start(wait=False)
        guard.on_stop = worker.offer
        guard.warm_up(4)  # again: connecting may have left it idle for seconds
        guard_loop(guard, windows, shutdown, on_stop)
    except RtgateError as e:
        return e
    except Ended:
        pass
    finally:
        shutdown.closing = True  # a second signal must not cut the clean-up short
        pub.wait_delivered(5.0)
        pub.close(reason=shutdown.reason)
        if worker is not None:  # also when the input failed: the child does not outlive us
            worker.stop(timeout_s=60.0 if shutdown.reason == "closed" else 10.0)
    return None
