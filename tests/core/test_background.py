"""The owner of background work: holds, logs and swallows, cancels and awaits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from rtgate.core.background import Background
from rtgate.core.errors import Declined


async def test_a_failing_task_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "rtgate.background")
    bg = Background("test")
    go = asyncio.Event()

    async def fails() -> None:
        await go.wait()
        raise RuntimeError("close failed")

    task = bg.spawn(fails())
    assert task is not None and len(bg) == 1
    go.set()
    await bg.join()  # does not raise
    assert len(bg) == 0
    assert "background task failed" in caplog.text and "close failed" in caplog.text


async def test_aclose_cancels_and_awaits_everything() -> None:
    bg = Background("test")
    started, unwound = asyncio.Event(), asyncio.Event()

    async def hangs() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            unwound.set()

    task = bg.spawn(hangs())
    assert task is not None
    await started.wait()
    await bg.aclose()
    assert task.cancelled() and unwound.is_set() and len(bg) == 0


async def test_spawn_after_close_is_refused_without_running_the_work() -> None:
    bg = Background("test")
    await bg.aclose()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    assert bg.closed and bg.spawn(work()) is None  # closed unrun: no "never awaited"
    assert len(bg) == 0 and not ran
    bg.open()
    task = bg.spawn(work())
    assert task is not None
    await task
    assert ran


def test_spawn_without_a_running_loop_is_refused() -> None:
    async def work() -> None:
        raise AssertionError("must not run")

    assert Background("test").spawn(work()) is None


async def test_an_abandoned_task_is_cancelled_and_its_stream_closed_after_it() -> None:
    bg = Background("test")
    waiting, closed = asyncio.Event(), asyncio.Event()

    async def stream() -> AsyncIterator[str]:
        try:
            try:
                waiting.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                yield "late"  # it survives the cancel: only a close ends it
            yield "more"
        finally:
            closed.set()

    agen = stream()
    task = asyncio.ensure_future(anext(agen))
    await waiting.wait()
    bg.abandon(task, agen)
    await closed.wait()  # closed by the owner once the task had unwound
    await bg.join()
    assert task.result() == "late" and len(bg) == 0


async def test_a_stream_still_iterated_by_a_task_is_left_to_that_task() -> None:
    bg = Background("test")
    waiting = asyncio.Event()

    async def stream() -> AsyncIterator[str]:
        waiting.set()
        await asyncio.Event().wait()
        yield "never"

    agen = stream()
    task = asyncio.ensure_future(anext(agen))
    await waiting.wait()
    bg.close_later(agen)  # running: closing it now would raise
    assert len(bg) == 0
    bg.abandon(task, agen)
    await bg.aclose()
    assert task.cancelled()


async def test_a_stream_that_has_ended_is_not_closed_in_a_task() -> None:
    bg = Background()

    async def declines() -> AsyncIterator[str]:
        raise Declined("no")
        yield "never"

    closed = []

    async def talks() -> AsyncIterator[str]:
        try:
            yield "a"
            yield "b"
        finally:
            closed.append(True)

    ended = declines()
    with pytest.raises(Declined):
        await anext(ended)
    bg.close_later(ended)
    assert len(bg) == 0  # nothing left to close: no task for it
    started = talks()
    assert await anext(started) == "a"
    bg.close_later(started)
    assert len(bg) == 1  # suspended mid-answer: closed in the background
    await bg.join()
    assert closed == [True]
