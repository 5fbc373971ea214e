"""Keeping the stop path's ticks free of collector pauses and fresh pages."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

from rtgate.apps.guard.rt import quiet_gc, steady_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_quiet_gc_collects_only_when_told_and_restores_the_collector() -> None:
    enabled = gc.isenabled()
    threshold = gc.get_threshold()[0]
    with quiet_gc() as idle:
        assert not gc.isenabled()
        ref = _cycle()
        young = [_Node() for _ in range(threshold + 10)]  # would have triggered a collection
        assert ref() is not None  # nothing collected by itself
        idle()
        assert ref() is None  # the cycle went at the moment the caller chose
        del young
    assert gc.isenabled() == enabled


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_steady_heap_is_accepted_by_glibc() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert steady_heap() is True
