"""The semantic scope check off the keystroke path: bounded, newest prefix wins, and a
late cloud job for an ask it reads as out-of-domain."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.apps.autocomplete.engine import AutocompleteEngine, EngineConfig
from rtgate.apps.autocomplete.semantic import SemanticVeto, SemanticWatch
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.core.errors import ConfigError
from rtgate.core.request import Piece, Request
from rtgate.models.embeddings import DIM
from rtgate.tiers._linear import LinearHead
from rtgate.tiers.answerability import Verdict
from rtgate.tiers.semantic_scope import Neighbours, SemanticScope
from tests.apps.autocomplete.ac_helpers import GatedCloud


class FakeScope:
    """Reads a prefix as out of scope when it holds ``"weather"``; ``gate`` (when set)
    holds each check until the test lets it through."""

    bar = 0.5
    pause_bar = 0.5

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[str] = []
        self.gate = gate
        self.taken = threading.Event()

    def out_of_scope(self, text: str) -> float:
        self.calls.append(text)
        self.taken.set()
        if self.gate is not None:
            self.gate.wait(5.0)
        return 0.9 if "weather" in text else 0.1

    def vetoes(self, p: float, *, pause: bool = False) -> bool:
        return p >= (self.pause_bar if pause else self.bar)


def _watch(scope: FakeScope, **kw: int) -> tuple[SemanticWatch, list[tuple[str, str, float]]]:
    told: list[tuple[str, str, float]] = []

    async def tell(session: str, prefix: str, p: float, pause: bool) -> None:
        told.append((session, prefix, p))

    return SemanticWatch(scope, tell, **kw), told  # type: ignore[arg-type]


async def test_an_out_of_scope_prefix_is_reported_and_cached() -> None:
    scope = FakeScope()
    watch, told = _watch(scope)
    watch.start()
    try:
        watch.submit("s1", "what's the weather ")
        watch.submit("s2", "how do i pay ")
        await watch.settle()
        assert told == [("s1", "what's the weather ", 0.9)]
        assert watch.cached("how do i pay ") == 0.1
        watch.submit("s3", "what's the weather ")  # read before: no second embedding
        await watch.settle()
        assert scope.calls.count("what's the weather ") == 1
        assert [t[0] for t in told] == ["s1", "s3"]
    finally:
        await watch.aclose()


async def test_the_newest_prefix_of_a_session_wins() -> None:
    scope = FakeScope()
    watch, told = _watch(scope)
    watch.submit("s", "what's the weather ")
    watch.submit("s", "what's the weather like ")  # replaces the waiting one
    watch.start()
    try:
        await watch.settle()
        assert scope.calls == ["what's the weather like "]
        assert told == [("s", "what's the weather like ", 0.9)]
    finally:
        await watch.aclose()


async def test_a_result_for_a_prefix_the_session_left_is_dropped() -> None:
    release = threading.Event()
    scope = FakeScope(release)
    watch, told = _watch(scope)
    watch.start()
    try:
        watch.submit("s", "what's the weather ")
        assert await asyncio.to_thread(scope.taken.wait, 5.0)  # the worker has taken it
        watch.seen("s", "what's the weather l")  # the user typed on (not checked)
        release.set()
        await watch.settle()
        assert told == []
        assert watch.cached("what's the weather ") == 0.9
    finally:
        release.set()
        await watch.aclose()


async def test_when_full_a_new_session_is_dropped_and_counted() -> None:
    watch, _ = _watch(FakeScope(), max_sessions=2)
    assert watch.submit("a", "x y z w ")
    assert watch.submit("b", "x y z w ")
    assert not watch.submit("c", "x y z w ")
    assert watch.submit("a", "x y z w v ")  # a waiting session may still move on
    assert watch.dropped == 1
    assert watch.snapshot()["waiting"] == 2


def test_the_veto_keeps_the_inner_judges_probability() -> None:
    class Inner:
        threshold = 0.4

        def judge(self, request: Request, piece: Piece | None) -> Verdict:
            return Verdict(0.8, 0.4, ("x",))

    veto = SemanticVeto(Inner(), FakeScope())  # type: ignore[arg-type]
    assert veto.judge(Request(input="a b c d "), None).answerable
    v = veto.judge(Request(input="a b c d ", meta={"semantic_out": 0.9}), None)
    assert not v.answerable and v.vetoed and v.p_right == 0.8
    assert v.reasons[-1] == "semantic scope 0.90"


def test_a_fast_answer_trusted_enough_overrules_the_semantic_check() -> None:
    class Inner:
        threshold = 0.4

        def __init__(self, p: float, vetoed: bool = False) -> None:
            self.p, self.vetoed = p, vetoed

        def judge(self, request: Request, piece: Piece | None) -> Verdict:
            return Verdict(self.p, 0.4, ("x",), vetoed=self.vetoed)

    def veto(p_right: float, p_out: float, *, pause: bool, inner_vetoed: bool = False) -> bool:
        meta = {"semantic_out": p_out, **({"pause": True} if pause else {})}
        check = SemanticVeto(Inner(p_right, inner_vetoed), FakeScope(), overrule=0.97)  # type: ignore[arg-type]
        v = check.judge(Request(input="pay bill", meta=meta), None)
        assert v.reasons[-1].startswith(f"semantic scope {p_out:.2f}")
        assert v.reasons[-1].endswith("overruled") == (not v.vetoed)
        return v.vetoed

    # at the pause: the judge must reach the bar, and be the surer of the two
    assert not veto(0.99, 0.95, pause=True)
    assert veto(0.96, 0.95, pause=True)  # under the bar
    assert veto(0.99, 0.95, pause=True, inner_vetoed=True)  # the inner judge vetoed
    assert veto(0.98, 0.995, pause=True)  # "放首歌": the check is the surer
    # a prefix still being typed: the surer of the two wins, whatever the bar
    assert not veto(0.96, 0.95, pause=False) and not veto(0.6, 0.55, pause=False)
    assert veto(0.6, 0.9, pause=False) and veto(0.99, 0.995, pause=False)
    assert veto(0.99, 0.95, pause=False, inner_vetoed=True)
    # no overrule at all
    off = SemanticVeto(Inner(1.0), FakeScope(), overrule=None)  # type: ignore[arg-type]
    assert off.judge(Request(input="pay bill", meta={"semantic_out": 0.9}), None).vetoed


def test_a_scope_model_round_trips(tmp_path: object) -> None:
    rng = np.random.default_rng(0)
    head = LinearHead(("multi", "ood", "simple"), rng.normal(size=(DIM, 3)), np.zeros(3), 1.0)

    class Emb:
        def embed(self, text: str) -> npt.NDArray[np.float32]:
            out: npt.NDArray[np.float32] = np.full(DIM, 1.0 / np.sqrt(DIM), dtype=np.float32)
            return out

    scope = SemanticScope(head, Emb(), bar=0.7)  # type: ignore[arg-type]
    path = f"{tmp_path}/s.npz"
    scope.save(path)
    back = SemanticScope.load(path, Emb())  # type: ignore[arg-type]
    assert back.bar == 0.7
    assert abs(back.out_of_scope("abc") - scope.out_of_scope("abc")) < 1e-12


def test_neighbours_weigh_the_nearest_examples_and_round_trip(tmp_path: object) -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(size=(2, DIM))
    # two clusters: in the domain around base[0], out of it around base[1]
    vecs = np.vstack([base[i] + 0.3 * rng.normal(size=(20, DIM)) for i in (0, 1)])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    near = Neighbours(vecs.astype(np.float32), np.array([False] * 20 + [True] * 20))
    inside = base[0] / np.linalg.norm(base[0])
    outside = base[1] / np.linalg.norm(base[1])
    f_in, f_out = near.features(inside, 0.5), near.features(outside, 0.5)
    assert f_in[1] == 0.0 and f_out[1] == 1.0 and f_in[2] < 0.0 < f_out[2]
    with pytest.raises(ConfigError, match="not fitted"):
        near.probability(inside, 0.5)
    near.fit([f_in, f_out] * 5, [0, 1] * 5)
    assert near.probability(inside, 0.5) < 0.5 < near.probability(outside, 0.5)
    head = LinearHead(("multi", "ood", "simple"), np.zeros((DIM, 3)), np.zeros(3), 1.0)

    class Emb:
        def embed(self, text: str) -> npt.NDArray[np.float32]:
            out: npt.NDArray[np.float32] = (outside if "far" in text else inside).astype(np.float32)
            return out

    scope = SemanticScope(head, Emb(), bar=0.9, pause_bar=0.6, neighbours=near)  # type: ignore[arg-type]
    path = f"{tmp_path}/s.npz"
    scope.save(path)
    back = SemanticScope.load(path, Emb())  # type: ignore[arg-type]
    assert back.neighbours is not None and back.pause_bar == 0.6 and back.bar == 0.9
    for text in ("far away", "near"):  # int8 on disk: the same reading within a hair
        assert abs(back.out_of_scope(text) - scope.out_of_scope(text)) < 0.02
    p = back.out_of_scope("far away")
    assert back.vetoes(p, pause=True) == (p >= 0.6) and back.vetoes(p) == (p >= 0.9)
    with pytest.raises(ConfigError):
        Neighbours(vecs[:10].astype(np.float32), np.zeros(10, dtype=bool))


async def test_engine_starts_a_late_cloud_job_for_an_out_of_domain_ask(reader: Reader) -> None:
    cloud = GatedCloud()
    cfg = EngineConfig(semantic=True)
    engine = AutocompleteEngine.build(cfg, reader=reader, cloud=BackgroundOnly(cloud))
    assert engine.watch is not None
    engine.watch.scope = FakeScope()  # type: ignore[assignment]
    late: list[tuple[str, str]] = []
    async with engine:
        prefix = "how is the weather in my card city "
        res = await engine.complete(
            prefix, session="s", on_late=lambda p, j: late.append((p, j)), pause=True
        )
        assert res.job_id is None or not late  # the keystroke itself never waited
        await engine.settle()
        if res.job_id is None:
            assert [p for p, _ in late] == [prefix]
            assert engine.gate.job(late[0][1]) is not None
        again = await engine.complete(prefix, session="t", on_late=lambda p, j: None, pause=True)
        assert again.route == "cloud_async"  # read before: judged inline, at no cost
        cloud.release.set()


async def test_a_short_out_of_domain_ask_is_read_at_the_pause(reader: Reader) -> None:
    cloud = GatedCloud()
    engine = AutocompleteEngine.build(EngineConfig(), reader=reader, cloud=BackgroundOnly(cloud))
    assert engine.watch is not None
    scope = FakeScope()
    engine.watch.scope = scope  # type: ignore[assignment]
    late: list[str] = []
    async with engine:
        typing = await engine.complete("weather today", session="s", on_late=lambda p, j: None)
        await engine.settle()
        assert typing.job_id is None and scope.calls == []  # inside a word: not sent
        paused = await engine.complete(
            "weather today", session="s", on_late=lambda p, j: late.append(j), pause=True
        )
        await engine.settle()
        assert paused.job_id is not None or late  # the judge, or the check after it
        cloud.release.set()


async def test_the_watch_says_whether_a_vetoed_prefix_came_at_a_pause() -> None:
    told: list[tuple[str, bool]] = []

    async def tell(session: str, prefix: str, p: float, pause: bool) -> None:
        told.append((prefix, pause))

    watch = SemanticWatch(FakeScope(), tell)  # type: ignore[arg-type]
    watch.start()
    try:
        watch.submit("s", "weather in ", pause=False)
        await watch.settle()
        watch.submit("s", "weather in paris", pause=True)
        await watch.settle()
    finally:
        await watch.aclose()
    assert told == [("weather in ", False), ("weather in paris", True)]


async def test_a_scope_that_never_vetoes_while_typing_reads_only_the_pause() -> None:
    scope = FakeScope()
    scope.bar = 1.01  # over 1: no typed prefix could be vetoed
    told: list[tuple[str, bool]] = []

    async def tell(session: str, prefix: str, p: float, pause: bool) -> None:
        told.append((prefix, pause))

    watch = SemanticWatch(scope, tell)  # type: ignore[arg-type]
    assert not watch.reads_typed
    watch.start()
    try:
        assert watch.submit("s", "weather in ", pause=False)  # taken, never read
        await watch.settle()
        assert scope.calls == [] and watch.cached("weather in ") is None
        watch.submit("s", "weather in paris", pause=True)
        await watch.settle()
    finally:
        await watch.aclose()
    assert scope.calls == ["weather in paris"]
    assert told == [("weather in paris", True)]
    # a custom relay (a judge that weighs every reading) still gets the typed prefixes
    relayed = SemanticWatch(scope, tell, relays=lambda p, pause: True)  # type: ignore[arg-type]
    assert relayed.reads_typed


async def test_a_judge_that_weighs_the_reading_gets_every_one_and_is_not_overruled() -> None:
    class Weighing:
        threshold = 0.4
        weighs_semantic = True

        def judge(self, request: Request, piece: Piece | None) -> Verdict:
            p_out = request.meta.get("semantic_out")
            p = 0.9 if p_out is None else 1.0 - float(p_out)
            return Verdict(p, 0.4, ("semantic scope weighed",) if p_out is not None else ())

    veto = SemanticVeto(Weighing(), FakeScope(), overrule=0.5)  # type: ignore[arg-type]
    assert veto.weighs
    low = veto.judge(Request(input="pay bill ", meta={"semantic_out": 0.1}), None)
    high = veto.judge(Request(input="pay bill ", meta={"semantic_out": 0.9}), None)
    assert low.answerable and not low.vetoed and low.p_right == pytest.approx(0.9)
    assert not high.answerable and not high.vetoed  # the judge's own p, no veto
    told: list[tuple[str, str, float]] = []

    async def tell(session: str, prefix: str, p: float, pause: bool) -> None:
        told.append((session, prefix, p))

    watch = SemanticWatch(FakeScope(), tell, relays=lambda p, pause: True)  # type: ignore[arg-type]
    watch.start()
    try:
        watch.submit("s", "how do i pay ")  # 0.1: under the scope's bar, handed back all the same
        await watch.settle()
    finally:
        await watch.aclose()
    assert told == [("s", "how do i pay ", 0.1)]


async def test_the_shipped_judge_weighs_only_the_pause_reading(reader: Reader) -> None:
    # session 28: the judge's semantic part decides at the pause; a typed prefix is not
    # read at all (its typed threshold is 0: the reading could not act)
    cloud = GatedCloud()
    engine = AutocompleteEngine.build(EngineConfig(), reader=reader, cloud=BackgroundOnly(cloud))
    watch = engine.watch
    assert watch is not None and isinstance(engine.gate.judge, SemanticVeto)
    assert engine.gate.judge.weighs and not watch.reads_typed
    assert watch.relays(0.99, True) and not watch.relays(0.99, False)
    scope = FakeScope()
    watch.scope = scope  # type: ignore[assignment]
    async with engine:
        typed = await engine.complete(
            "how is the weather in my ", session="s", on_late=lambda p, j: None
        )
        await engine.settle()
    assert typed.job_id is None and scope.calls == []


async def test_a_late_job_keeps_the_judges_line_with_both_of_its_inputs(reader: Reader) -> None:
    # session 29: at the pause the judge weighs the semantic reading with its own; the line
    # it leaves for the late job names both, so a replay can tell which one tipped it
    engine = AutocompleteEngine.build(
        EngineConfig(), reader=reader, cloud=BackgroundOnly(GatedCloud())
    )
    assert engine.watch is not None
    engine.watch.scope = FakeScope()  # type: ignore[assignment]  # "weather": 0.9 out
    late: list[str] = []
    ask = "how do i pay my card bill when the weather is bad"
    async with engine:
        res = await engine.complete(
            ask, session="s", on_late=lambda p, j: late.append(j), pause=True
        )
        await engine.settle()
    assert res.job_id is None and len(late) == 1  # answered fast, then sent on late
    why = engine.late_why[late[0]]
    assert "semantic scope 0.90 weighed with the judge's p=" in why
