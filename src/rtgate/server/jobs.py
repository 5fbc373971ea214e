"""Delegated jobs as the server handles them: confirmed before their id is sent, found and
awaited on any replica, cancelled when their client leaves.

- **Confirm** (:func:`confirm_job`): with a broker queue (Redis, NATS) a job first waits
  in this replica's outbox; an id sent before the job reached the broker could die with
  the replica. So the id is sent only after ``await queue.enqueued(id)`` (one broker round
  trip, after the in-budget answer is ready). The wait is bounded by what is left of the
  budget (at least ``MIN_CONFIRM_S``): a broker that is slow or refuses means the answer
  goes out without the id, the trace says why, and the job is cancelled.
- **Find / wait** (:func:`find`, :func:`wait`): this replica's store first, else the
  broker's record, so any replica answers ``GET /v1/jobs/{id}`` and follows a job
  submitted elsewhere (``Gate.find_job`` / ``Gate.wait_job``).
- **Cancel** (:func:`cancel`): a job whose client left before it could receive the id or
  the follow-up is stopped (``Gate.stop_job``): at once in process; on a broker it is
  recorded there, so no worker starts it, in the gate's background.
"""

from __future__ import annotations

import asyncio

from rtgate.core.errors import JobNotFound
from rtgate.gate import GateResult
from rtgate.gate.jobs import Job
from rtgate.server.state import ServerState

__all__ = ["MIN_CONFIRM_S", "cancel", "cancel_mine", "confirm_job", "find", "wait"]

MIN_CONFIRM_S = 0.010
"""The least time given to the broker to confirm a job, even when the budget is spent."""


async def confirm_job(st: ServerState, result: GateResult) -> GateResult:
    """``result``, its job id kept only once the job is on the broker (see the module
    docstring). In effect a no-op for the in-process queue or an answer without a job."""
    job_id = result.job_id
    if job_id is None:
        return result
    trace = result.trace
    left_s = max(MIN_CONFIRM_S, (trace.budget_ms - trace.elapsed_ms) / 1000.0)
    why = "refused by the broker"
    try:
        async with asyncio.timeout(left_s):
            ok = await st.gate.job_queued(job_id)
    except TimeoutError:
        ok, why = False, f"not confirmed by the broker within {left_s * 1000:.0f} ms"
        cancel(st, job_id)
    if not ok:
        job = st.gate.job(job_id)
        detail = job.error if job is not None and job.error else why
        note = f"delegation not confirmed: {detail}"
        trace.degraded = f"{trace.degraded}; {note}" if trace.degraded else note
        result.job_id = trace.job_id = None
    return result


async def find(st: ServerState, job_id: str, owner: str | None = None) -> Job:
    """The job, from this replica or the broker, if ``owner`` may see it. Raises
    ``JobNotFound``, the same for another owner's job as for an id that never existed."""
    return _mine(await st.gate.find_job(job_id), owner)


async def wait(st: ServerState, job_id: str, owner: str | None = None) -> Job:
    """The finished job, wherever it was submitted, if ``owner`` may see it. Raises
    ``JobNotFound``."""
    await find(st, job_id, owner)
    return await st.gate.wait_job(job_id)


def _mine(job: Job, owner: str | None) -> Job:
    if job.owner is not None and job.owner != owner:
        raise JobNotFound(f"no job {job.id!r}")
    return job


async def cancel_mine(st: ServerState, job_id: str, owner: str | None) -> Job:
    """Cancel ``owner``'s job (queued or running, on any replica); the job as it is then.
    Raises ``JobNotFound``."""
    job = await find(st, job_id, owner)
    if job.status in ("queued", "running"):
        st.gate.stop_job(job_id)
        local = st.gate.job(job_id)
        job = local if local is not None else job
    return job


def cancel(st: ServerState, job_id: str) -> None:
    """Stop a job nobody will collect (see the module docstring); never raises."""
    st.gate.stop_job(job_id)
