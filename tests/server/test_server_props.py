"""Any body, on any endpoint, gives an answer or a clear JSON 4xx: never a 5xx."""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, running

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=20,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "developer", "assistant", "tool", "x"]) | _json},
    optional={"content": st.text(max_size=20) | _json},
)
_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["auto", "x"]) | _json,
        "messages": st.lists(_message, max_size=3) | _json,
        "input": st.text(max_size=10) | _json,
        "stream": st.booleans() | _json,
        "max_tokens": st.integers(-5, 200_000) | _json,
        "budget_ms": st.floats() | st.integers(-5, 10**8) | _json,
        "delegate": st.booleans() | _json,
        "stop": st.text(max_size=3) | _json,
    },
)
_headers = st.fixed_dictionaries(
    {}, optional={"X-Budget-Ms": st.text(st.characters(min_codepoint=32, max_codepoint=126))}
)


async def _post(path: str, raw: str, headers: dict[str, str]) -> tuple[int, str]:
    gate = fake_gate([FakeTier("local", 50, ["ok"])], local=5.0)
    async with running(gate) as (_, client):
        r = await client.post(
            path, content=raw, headers={"content-type": "application/json", **headers}
        )
        return r.status_code, r.text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(_bodies.map(json.dumps), _json.map(json.dumps), st.text(max_size=30)),
    st.sampled_from(["/v1/gate", "/v1/chat/completions"]),
    _headers,
)
def test_any_body_is_answered_or_refused_clearly(
    raw: str, path: str, headers: dict[str, str]
) -> None:
    status, text = asyncio.run(_post(path, raw, headers))
    assert status < 500, text
    if status >= 400:
        err = json.loads(text)["error"]
        assert isinstance(err["code"], str) and isinstance(err["message"], str)
