"""The semantic scope check, off the keystroke path.

A prefix the engine may send to the cloud and that the fast tiers answered (and the
judge trusted) is handed to :class:`SemanticWatch`; its one worker embeds it in a thread
(:class:`~rtgate.tiers.semantic_scope.SemanticScope`, 10-50 ms) after the suggestions
were already shown. When the model reads the ask as multi-part or out of the domain,
the watch calls back, and the engine starts the cloud job the judge would have started
(the placeholder and the cloud's suggestions later, as for any delegated ask). With a
judge that weighs the reading itself (a format-2 judge with a semantic part,
:attr:`~rtgate.tiers.answerability.CalibratedJudge.weighs_semantic`), the watch hands
every reading back (``relays``), and the judge decides with it.

Bounds: one worker; at most ``max_sessions`` sessions waiting, each with only its newest
prefix (a newer prefix of a session replaces the one waiting; one already being
embedded is finished and cached, and its result is dropped if the session moved on).
A prefix submitted at a pause (the whole ask) is held to the scope's ``pause_bar``; a
scope whose typing bar is over 1 (it never vetoes a prefix still being typed) is given
only those.
When full, a new session's prefix is dropped and counted (``dropped``): it was answered
by the fast tiers all the same. Results are cached per text (LRU of ``cache_size``), and
the engine also consults the cache inline, so a prefix seen before is judged at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from rtgate.core.request import Piece, Request
from rtgate.tiers.answerability import Judge, Verdict
from rtgate.tiers.semantic_scope import SemanticScope

__all__ = ["SemanticVeto", "SemanticWatch"]

OnOutOfScope = Callable[[str, str, float, bool], Awaitable[None]]


class SemanticVeto:
    """A judge that wraps the domain's (``inner``, or none) and vetoes a fast answer whose
    request carries ``meta["semantic_out"]``: the semantic check read the prefix as
    multi-part or out-of-domain (the engine only sets it when ``scope`` vetoes).

    ``overrule``: a fast answer the inner judge trusts at least this much (``p_right``)
    stands against the semantic check at the pause (``meta["pause"]``: the whole ask): a
    short in-domain ask ("pay bill") may sit near out-of-domain examples in the embedding
    while its intent is plain to the classifier. Both are probabilities, so the surer one
    wins: the overrule holds only while ``p_right`` is at least the check's own
    out-of-scope probability ("放首歌", play a song: the judge 0.996 sure of a fast answer,
    the check 0.998 sure it is out of the domain). A prefix still being typed is not the
    ask yet (the pause reads the whole of it again), so there the surer one wins at any
    ``p_right``: the check's veto of a typed prefix stands only when it is surer that the
    prefix is out of scope than the judge is that the fast answer is right. ``None``: no
    overrule, typed or at the pause.

    An inner judge that weighs the reading itself (``weighs_semantic``) is not overruled
    nor vetoed here: its verdict, made with the reading, stands."""

    def __init__(
        self, inner: Judge | None, scope: SemanticScope, *, overrule: float | None = None
    ) -> None:
        self.inner = inner
        self.scope = scope
        self.overrule = overrule
        self.threshold = inner.threshold if inner is not None else 0.0
        # the inner judge weighs the reading itself: every reading goes back to the gate
        self.weighs = bool(getattr(inner, "weighs_semantic", False))

    def judge(self, request: Request, piece: Piece | None) -> Verdict:
        v = self.inner.judge(request, piece) if self.inner is not None else Verdict(1.0, 0.0)
        p_out = request.meta.get("semantic_out")
        if p_out is None or self.weighs:
            return v
        sure = False
        if self.overrule is not None:  # typed: the surer one wins; at the pause: >= overrule
            floor = self.overrule if request.meta.get("pause") else 0.0
            sure = v.p_right >= max(floor, float(p_out))
        if sure and not v.vetoed:
            why = (*v.reasons, f"semantic scope {float(p_out):.2f} overruled")
            return Verdict(v.p_right, v.threshold, why)
        why = (*v.reasons, f"semantic scope {float(p_out):.2f}")
        return Verdict(v.p_right, v.threshold, why, vetoed=True)


class SemanticWatch:
    """Runs ``scope`` on submitted prefixes in the background (see the module docstring).

    Args:
        scope: the semantic scope model (blocking; run in a worker thread).
        on_out_of_scope: ``await on_out_of_scope(session, prefix, p, pause)`` when
            ``prefix`` is still its session's newest and ``relays(p, pause)`` (``pause``: it
            was submitted at a pause).
        relays: which readings go back (default: those ``scope`` vetoes at its bar).
        reads_typed: whether prefixes still being typed are read at all (default: when
            ``relays`` is given, or the scope's typing bar can veto; see :attr:`reads_typed`).
        max_sessions: sessions that may wait at once.
        cache_size: texts whose reading is remembered.
    """

    def __init__(
        self,
        scope: SemanticScope,
        on_out_of_scope: OnOutOfScope,
        *,
        max_sessions: int = 64,
        cache_size: int = 4096,
        relays: Callable[[float, bool], bool] | None = None,
        reads_typed: bool | None = None,
    ) -> None:
        self.scope = scope
        self.relays = relays or (lambda p, pause: self.scope.vetoes(p, pause=pause))
        self._relays_all = relays is not None
        self._reads_typed = reads_typed
        self.on_out_of_scope = on_out_of_scope
        self.max_sessions = max_sessions
        self.cache_size = cache_size
        # session -> its newest prefix, and whether it came at a pause
        self._waiting: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._latest: OrderedDict[str, str] = OrderedDict()  # session -> newest submitted
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._worker: asyncio.Task[None] | None = None
        self.dropped = 0
        self.checked = 0
        self.vetoed = 0
        self.busy_s = 0.0  # wall time of the worker's embeddings
        self.cpu_s = 0.0  # CPU time of the threads that ran them (a one-thread engine: all)

    @property
    def reads_typed(self) -> bool:
        """Whether a prefix still being typed is read: as told, else not when the scope's
        typing bar is over 1 (it never vetoes one) and only vetoes are relayed (session
        21). A judge that weighs only the pause's reading needs no typed one (session 28)."""
        if self._reads_typed is not None:
            return self._reads_typed
        return self._relays_all or self.scope.bar <= 1.0

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.create_task(self._run(), name="ac-semantic")

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    def cached(self, text: str) -> float | None:
        """The remembered out-of-scope probability of ``text`` (never computes)."""
        p = self._seen.get(text)
        if p is not None:
            self._seen.move_to_end(text)
        return p

    def seen(self, session: str, prefix: str) -> None:
        """Note ``session``'s newest prefix (any prefix, checked or not): a result for an
        older one is then dropped."""
        self._latest[session] = prefix
        self._latest.move_to_end(session)
        while len(self._latest) > 4 * self.max_sessions:
            self._latest.popitem(last=False)

    def submit(self, session: str, prefix: str, *, pause: bool = False) -> bool:
        """Queue ``prefix`` (non-blocking; ``pause``: the whole ask, when typing stopped);
        False when dropped because the watch is full."""
        self.seen(session, prefix)
        if not (pause or self.reads_typed):
            return True  # nothing it could say would be relayed: not read at all
        if session in self._waiting:
            self._waiting[session] = (prefix, pause)  # the newest prefix of a session wins
        elif len(self._waiting) >= self.max_sessions:
            self.dropped += 1
            return False
        else:
            self._waiting[session] = (prefix, pause)
        self._idle.clear()
        self._wake.set()
        return True

    async def settle(self) -> None:
        """Wait until nothing waits and nothing runs (for replays and tests)."""
        await self._idle.wait()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._waiting:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            session, (prefix, pause) = self._waiting.popitem(last=False)
            p = self.cached(prefix)
            if p is None:
                t0 = loop.time()
                try:
                    p = await asyncio.to_thread(self._read, prefix)
                except Exception:  # a failed check only loses a delegation
                    continue
                self.busy_s += loop.time() - t0
                self.checked += 1
                self._remember(prefix, p)
            if self.relays(p, pause) and self._latest.get(session) == prefix:
                self.vetoed += 1
                try:
                    await self.on_out_of_scope(session, prefix, p, pause)
                except Exception:
                    pass

    def _read(self, text: str) -> float:
        c0 = time.thread_time()
        try:
            return self.scope.out_of_scope(text)
        finally:
            self.cpu_s += time.thread_time() - c0

    def _remember(self, text: str, p: float) -> None:
        self._seen[text] = p
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)

    def snapshot(self) -> dict[str, Any]:
        return {
            "waiting": len(self._waiting),
            "checked": self.checked,
            "vetoed": self.vetoed,
            "dropped": self.dropped,
            "busy_s": round(self.busy_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "ms_per_check": round(1000.0 * self.busy_s / max(1, self.checked), 2),
        }
