"""Real-time scheduling for the stop path (Linux ``SCHED_FIFO``), opt-in.

On a busy machine the stop path competes with everything else for the CPU; a plant runs it
at a real-time priority so a batch job cannot delay a stop. ``realtime`` changes the calling
thread only, and threads it starts meanwhile inherit the policy: enter it after the
explainer's threads exist (they stay at normal priority) and before the MQTT client starts
its network thread.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["realtime"]


@contextmanager
def realtime(priority: int, switch_s: float = 0.0005) -> Iterator[bool]:
    """Run the block in ``SCHED_FIFO`` at ``priority`` (1-99); yields False if not allowed.

    Also shortens the interpreter's thread switch interval to ``switch_s``, so the MQTT
    network thread is not kept waiting for the GIL by a tick's computation. ``priority <= 0``
    changes nothing. The previous settings are restored on exit.
    """
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        yield False
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0), sys.getswitchinterval()
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(min(priority, 99)))
    except OSError:
        yield False
        return
    sys.setswitchinterval(switch_s)  # the MQTT thread gets the GIL back sooner
    try:
        yield True
    finally:
        sys.setswitchinterval(before[2])
        os.sched_setscheduler(0, before[0], before[1])
