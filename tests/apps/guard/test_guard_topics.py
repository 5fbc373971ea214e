"""Topics the guard publishes to are checked before the first window, by one function."""

from __future__ import annotations

import pytest

from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.apps.guard.topics import MAX_TOPIC_BYTES, check_topic, expand_topic
from rtgate.core.errors import ConfigError, InvalidRequest


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("", "empty"),
        ("line/+/stop", "wildcards"),
        ("line/#", "wildcards"),
        ("+", "wildcards"),
        ("line/a\x00b", "NUL"),
        ("é" * (MAX_TOPIC_BYTES // 2 + 1), "longer than 65535 bytes"),
    ],
)
def test_a_topic_no_client_may_publish_to_is_refused(topic: str, why: str) -> None:
    with pytest.raises(InvalidRequest, match=why):
        check_topic(topic, "stop topic")


def test_a_topic_name_passes_unchanged() -> None:
    for ok in ("line1/C/stop", "/", "a b/ü/{x", "x" * MAX_TOPIC_BYTES):
        assert check_topic(ok) == ok


def test_only_the_station_placeholder_is_expanded() -> None:
    assert expand_topic("line/{station}/stop", "C") == "line/C/stop"
    with pytest.raises(InvalidRequest, match=r"unknown placeholder \{nope\}"):
        expand_topic("line/{nope}/stop", "C")
    with pytest.raises(InvalidRequest, match="wildcards"):  # the name is checked expanded
        expand_topic("line/{station}/stop", "C+D")


def test_a_rule_with_a_wildcard_or_unknown_placeholder_is_a_config_error() -> None:
    for bad in ("line/+/stop", "line/{nope}/stop", "line/#", ""):
        with pytest.raises(ConfigError, match="stop topic"):
            Rule(topic=bad)


def test_the_guard_checks_every_station_topic_up_front() -> None:
    rules = Rules(Rule(topic="line/{station}/stop"))
    det = Detector(n_streams=2)
    with pytest.raises(InvalidRequest, match=r"'line/B\+/stop'"):
        Guard(["A", "B+"], rules, detector=det)
    guard = Guard(["A", "B"], rules, detector=det)
    assert guard.topics == ["line/A/stop", "line/B/stop"]
