"""Real-time scheduling for the stop path (Linux ``SCHED_FIFO``), opt-in.

On a busy machine the stop path competes with everything else for the CPU; a plant runs it
at a real-time priority so a batch job cannot delay a stop. ``realtime`` changes the calling
thread only, and threads it starts meanwhile inherit the policy: enter it after the
explainer's threads exist (they stay at normal priority) and before the MQTT client starts
its network thread.

Two more things stall a tick without using the CPU for the stop path's work: fresh memory
pages (glibc hands arrays over 128 KB out as new ``mmap`` pages and gives them back on free;
every page is then a fault, ~2 us each on a virtual machine, ~0.5-1 ms per tick at 256
stations before the features kept their work arrays), which ``steady_heap`` prevents, and
the cyclic garbage collector, which ``quiet_gc`` moves between ticks.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["quiet_gc", "realtime", "steady_heap"]

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters
_M_MMAP_THRESHOLD = -3


def steady_heap(mmap_threshold: int = 32 << 20, trim_threshold: int = 512 << 20) -> bool:
    """Keep freed memory in the process (glibc): blocks under ``mmap_threshold`` bytes come
    from the heap, and the heap is given back to the OS only past ``trim_threshold`` bytes
    free. Process-wide and not undone; False where there is no glibc ``mallopt``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


@contextmanager
def quiet_gc() -> Iterator[Callable[[], None]]:
    """No automatic garbage collection in the block; yields ``idle()`` to call between ticks.

    On entry, everything that exists is collected and frozen (full collections skip it
    later). ``idle()`` runs the collection the interpreter would have run by now (usually
    the youngest generation, well under a millisecond), at a moment the caller chose. The
    previous state is restored on exit.
    """
    gc.collect()
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()
    t0, t1, t2 = gc.get_threshold()

    def idle() -> None:
        c0, c1, c2 = gc.get_count()
        if c0 >= t0:
            gc.collect(2 if c2 + 1 >= t2 else 1 if c1 + 1 >= t1 else 0)

    try:
        yield idle
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


@contextmanager
def realtime(priority: int, switch_s: float = 0.0005) -> Iterator[bool]:
    """Run the block in ``SCHED_FIFO`` at ``priority`` (1-99); yields False if not allowed.

    Also shortens the interpreter's thread switch interval to ``switch_s``, so the MQTT
    network thread is not kept waiting for the GIL by a tick's computation, and calls
    ``steady_heap`` (not undone). ``priority <= 0`` changes nothing. The previous scheduling
    and switch interval are restored on exit.
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
    steady_heap()
    try:
        yield True
    finally:
        sys.setswitchinterval(before[2])
        os.sched_setscheduler(0, before[0], before[1])
