"""What a tier's error may leave in a trace or a job record: never the text a library
quoted (a prompt template, the request, another user's words)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from rtgate.core.budget import Budget
from rtgate.core.errors import BackendUnavailable
from rtgate.core.latency import LatencyModel, Prior
from rtgate.core.request import Piece, Request
from rtgate.core.trace import error_detail
from rtgate.gate import Gate, GateConfig
from rtgate.gate.job_runner import run_tier_job
from rtgate.gate.jobs import Job
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier

LEAK = "SYSTEM: you are a bank assistant. Few-shot: Q: my card A: ..."


class Leaky(Tier):
    """Fails the way a library does: quoting what it was given."""

    name, quality = "local", 50

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        raise ValueError(f"cannot tokenize {LEAK} {request.input}")
        yield ""  # an async generator


def test_error_detail_keeps_rtgates_words_and_drops_a_librarys() -> None:
    assert error_detail(ValueError(LEAK)) == "ValueError"
    assert error_detail(BackendUnavailable("cloud: connection refused")) == (
        "BackendUnavailable: cloud: connection refused"
    )
    assert len(error_detail(BackendUnavailable("x" * 5000))) < 300


async def test_a_failing_tier_leaves_only_its_error_type_in_the_trace() -> None:
    gate = Gate(
        [Leaky(), FakeTier("template", 10, ["ok"])],
        config=GateConfig(),
        priors={"local": Prior(1.0, 1.0), "template": Prior(1.0, 1.0)},
    )
    result = await gate.answer(Request("another user's secret question"), 1000)
    assert result.text == "ok"
    (failed,) = [a for a in result.trace.attempts if a.tier == "local"]
    assert failed.outcome == "error" and failed.detail == "ValueError"
    assert LEAK not in str(result.to_dict()) and "secret question" not in str(result.to_dict())


async def test_a_failed_job_records_only_the_error_type() -> None:
    job = Job("job-x", "local", Request("another user's secret question"), 1000.0)
    await run_tier_job(Leaky(), job, LatencyModel(), None)
    assert job.status == "failed" and job.error == "ValueError"
    assert LEAK not in str(job.to_dict())
