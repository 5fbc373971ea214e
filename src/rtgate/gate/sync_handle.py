"""What :class:`~rtgate.gate.sync_facade.SyncGate` hands its callers: a :class:`Handle` per
submitted request, polled from the caller's thread without blocking, and the
:class:`Delivery` items of its queue mode.

Kept apart from the facade because it is the caller's side only: a handle reads what the
loop thread has written and never touches the loop itself (``cancel`` goes through the
facade, which schedules it on the loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Literal

from rtgate.core.budget import Budget
from rtgate.core.request import Request
from rtgate.gate.jobs import Job
from rtgate.gate.types import GateResult

__all__ = ["Delivery", "Handle", "State"]

State = Literal["pending", "ready", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One item from :meth:`~rtgate.gate.sync_facade.SyncGate.drain`: a primary answer,
    a follow-up or a failure."""

    handle: Handle
    kind: Literal["result", "followup", "error"]
    result: GateResult | None = None
    job: Job | None = None
    error: BaseException | None = None


class Handle:
    """A submitted request, polled from the caller's thread without blocking.

    ``result()`` returns ``None`` while the answer is pending (so a frame can poll it with
    ``if (r := h.result()) is not None``), the :class:`GateResult` once ready, raises
    ``concurrent.futures.CancelledError`` after :meth:`cancel` and re-raises the error if
    serving failed. ``followup()`` likewise returns the delegated job or ``None``.
    """

    __slots__ = (
        "_canceller",
        "_done",
        "_error",
        "_follow_done",
        "_followup",
        "_partial",
        "_result",
        "_slot",
        "_state",
        "_task",
        "budget",
        "done_at",
        "follow",
        "request",
        "tag",
    )

    def __init__(
        self,
        canceller: Callable[[Handle], bool],
        request: Request,
        budget: Budget,
        follow: bool,
        tag: Any,
    ) -> None:
        self._canceller = canceller  # the facade's: schedules the cancel on its loop
        self.request = request
        self.budget = budget
        self.follow = follow
        self.tag = tag
        self._state: State = "pending"
        self._result: GateResult | None = None
        self._error: BaseException | None = None
        self._followup: Job | None = None
        self._partial = ""  # rebound (never mutated) by the loop thread: reads are atomic
        self._slot = True
        self._task: asyncio.Task[None] | None = None  # touched on the loop thread only
        self._done = threading.Event()
        self._follow_done = threading.Event()
        self.done_at: float | None = None  # loop clock when the primary answer arrived

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def ready(self) -> bool:
        """The primary answer (or its failure) has arrived."""
        return self._state in ("ready", "failed")

    @property
    def cancelled(self) -> bool:
        return self._state == "cancelled"

    @property
    def done(self) -> bool:
        """Nothing more will change the primary answer: ready, failed or cancelled."""
        return self._state != "pending"

    @property
    def partial(self) -> str:
        """The answer's text so far. With ``scope="first_token"`` it grows piece by piece
        while the rest streams, so a frame can act on the start of an answer early."""
        return self._partial

    @property
    def followup_pending(self) -> bool:
        """The answer was delegated and the deeper one has not arrived yet."""
        r = self._result
        return (
            self._state == "ready"
            and r is not None
            and r.job_id is not None
            and self.follow
            and self._followup is None
        )

    def result(self) -> GateResult | None:
        """The answer, or ``None`` while pending (never blocks; see the class docstring)."""
        state = self._state
        if state == "ready":
            return self._result
        if state == "cancelled":
            raise CancelledError(f"{self.id} was cancelled")
        if state == "failed":
            assert self._error is not None
            raise self._error
        return None

    def followup(self) -> Job | None:
        """The delegated job once it has finished (check ``job.status``), else ``None``."""
        return self._followup

    def cancel(self) -> bool:
        """Stop serving this request and any delivery for it. Returns ``False`` when there
        was nothing left to cancel (the answer and any follow-up were already delivered)."""
        return self._canceller(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the primary answer is done. For scripts and tests, never in a frame."""
        return self._done.wait(timeout)

    def wait_followup(self, timeout: float | None = None) -> bool:
        """Block until the follow-up has arrived (or will not). Never in a frame."""
        return self._follow_done.wait(timeout)

    def __repr__(self) -> str:
        return f"<Handle {self.id} {self._state}>"
