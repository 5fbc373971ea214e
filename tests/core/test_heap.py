"""The frozen heap: what exists on entry leaves the collector's view, and comes back."""

from __future__ import annotations

import gc

from rtgate.core.heap import frozen_heap


def test_what_exists_is_frozen_for_the_block_and_unfrozen_after() -> None:
    held = [object() for _ in range(1000)]  # long-lived, as loaded models are
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() >= len(held)
        made_inside: list[int] = []
        assert any(o is made_inside for o in gc.get_objects())  # what comes after is seen
        assert not any(o is held for o in gc.get_objects())  # frozen: not in a generation
    assert gc.get_freeze_count() == 0
    assert any(o is held for o in gc.get_objects())


def test_the_heap_is_unfrozen_when_the_block_raises() -> None:
    gc.unfreeze()
    try:
        with frozen_heap():
            raise RuntimeError("a benchmark failed")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0
