"""Jobs and requests as JSON, and the queue chosen by configuration."""

from __future__ import annotations

import pytest

from rtgate.core.errors import ConfigError, InvalidRequest
from rtgate.core.request import Message, Request
from rtgate.delegate.codec import (
    apply_result,
    decode_job,
    encode_job,
    request_from_dict,
    request_to_dict,
)
from rtgate.delegate.factory import DelegationSettings, make_queue
from rtgate.delegate.jetstream import JetStreamQueue
from rtgate.delegate.redis_streams import RedisStreamsQueue
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.jobs import Job


def test_a_request_survives_the_wire() -> None:
    req = Request(
        input="能退吗",
        messages=(Message("system", "be brief"), Message("user", "能退吗")),
        max_tokens=64,
        temperature=0.3,
        stop=("\n",),
        delegate=True,
        meta={"lang": "zh", "n": [1, 2]},
        id="req-x",
    )
    job = Job("job-1", "cloud", req, 2_000.0)
    back, reply = decode_job(encode_job(job, "replica-a"))
    assert back.request == req and reply == "replica-a"
    assert (back.id, back.tier, back.budget_ms) == ("job-1", "cloud", 2_000.0)
    assert request_from_dict(request_to_dict(req)) == req


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"input": 3},
        {"input": "x", "messages": [{"role": "robot", "content": "hi"}]},
        {"input": "x", "max_tokens": "many"},
        {"input": "x", "max_tokens": True},
        {"input": "x", "stop": [1]},
        {"input": "x", "delegate": "yes"},
    ],
)
def test_malformed_requests_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        request_from_dict(bad)


def test_malformed_job_messages_are_refused() -> None:
    for raw in (b"not json", b'{"id": "j"}', b'{"id":"j","tier":"t","budget_ms":1,"request":{}}'):
        with pytest.raises(InvalidRequest):
            decode_job(raw)


def test_apply_result_treats_an_unknown_status_as_failed() -> None:
    job = Job("j", "cloud", None, 1.0)
    apply_result(job, {"id": "j", "status": "exploded", "text": "t", "elapsed_ms": "2.5"})
    assert (job.status, job.text, job.elapsed_ms) == ("failed", "t", 2.5)


def test_make_queue_chooses_the_backend() -> None:
    assert isinstance(make_queue({}), InProcessQueue)
    q = make_queue({"backend": "redis", "prefix": "p", "queue_size": 7, "redeliver_after_s": 2})
    assert isinstance(q, RedisStreamsQueue)
    assert (q.maxsize, q.min_idle_ms, q.stream) == (7, 2000, "p:jobs")
    n = make_queue(DelegationSettings(backend="nats", url="nats://h:4222"), consume=True)
    assert isinstance(n, JetStreamQueue) and n.consume and n.url == "nats://h:4222"


@pytest.mark.parametrize(
    "bad",
    [{"backend": "kafka"}, {"queue_size": 0}, {"poll_s": 0}, {"backnd": "redis"}],
)
def test_bad_delegation_settings_are_config_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DelegationSettings.of(bad)


def test_nats_names_must_be_subject_safe() -> None:
    with pytest.raises(ConfigError):
        JetStreamQueue(prefix="a.b")
