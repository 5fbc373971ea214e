"""Keep long-lived objects out of the garbage collector's full collections.

A process that has loaded its models holds ~10^5 objects that live as long as it does; a
full collection rescans them all, on the event loop, for tens of milliseconds (42 ms
measured mid-benchmark, enough to push a request near its budget past it). Freezing them
once after start-up (``gc.freeze``) moves them to the permanent generation, so later
collections see only what was made since.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap"]


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect, then freeze everything that exists, for the block; unfreeze on exit (the
    objects return to the collector's view, e.g. for the next engine of a benchmark)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
