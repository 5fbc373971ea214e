"""MQTT topic names the guard publishes to: checked once, before the first window.

MQTT 3.1.1 (section 4.7) allows a client to publish only to a topic *name*: at least one
character, no wildcard (``+`` or ``#``), no NUL, at most 65,535 bytes of UTF-8. paho raises
``ValueError`` on a wildcard at ``publish`` time, which on the stop path would be a stop
lost at the moment it matters, so :func:`check_topic` applies the same rules up front.

A topic in a rules file or on the command line is a template: ``{station}`` is the only
placeholder (:func:`expand_topic`); any other ``{word}`` is a typo, refused rather than
published literally.
"""

from __future__ import annotations

import re

from rtgate.core.errors import InvalidRequest

__all__ = ["MAX_TOPIC_BYTES", "check_topic", "expand_topic"]

MAX_TOPIC_BYTES = 65_535
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def check_topic(topic: str, what: str = "topic") -> str:
    """``topic`` unchanged if a client may publish to it; else :class:`InvalidRequest`
    naming ``what`` (e.g. ``"stop topic"``) and the rule it breaks."""
    problem = None
    if not isinstance(topic, str) or not topic:
        problem = "it is empty"
    elif "+" in topic or "#" in topic:
        problem = "wildcards (+, #) are for subscribing, not publishing"
    elif "\x00" in topic:
        problem = "it contains a NUL character"
    elif len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        problem = f"it is longer than {MAX_TOPIC_BYTES} bytes"
    if problem is not None:
        raise InvalidRequest(f"{what} {topic!r} cannot be published to: {problem}")
    return topic


def expand_topic(template: str, station: str, what: str = "topic") -> str:
    """``template`` with ``{station}`` replaced by ``station``, then :func:`check_topic`.

    Raises :class:`InvalidRequest` for any other placeholder, such as ``{nope}``.
    """
    unknown = sorted({m for m in _PLACEHOLDER.findall(template) if m != "station"})
    if unknown:
        names = ", ".join("{" + u + "}" for u in unknown)
        raise InvalidRequest(f"{what} {template!r}: unknown placeholder {names} (only {{station}})")
    return check_topic(template.replace("{station}", station), what)
