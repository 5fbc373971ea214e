"""The two records a stop leaves: the message on the wire and the event beside it.

Plain data, no I/O: the stop path (``pipeline``, ``mqtt``) and the explainer's side
(``explain``) both import this module and nothing of each other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["StopEvent", "StopMessage"]


@dataclass(frozen=True, slots=True)
class StopMessage:
    """The stop as published: times are UNIX epoch seconds.

    ``ts`` is when it was published; ``window_end_ts`` when the last sample of the deciding
    window arrived.
    """

    station: str
    score: float
    ts: float
    window_end_ts: float
    rule: str

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class StopEvent:
    """A stop that was decided (and published, when there is a publisher)."""

    message: StopMessage
    topic: str
    index: int  # the station's row
    clip: npt.NDArray[np.float32] = field(repr=False)  # last seconds at 16 kHz, oldest first
    decided_ts: float = 0.0  # when the rule fired, before publishing
