"""The judge's fitting and measuring helpers, on a handful of asks."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from rtgate.apps.autocomplete.abstention import (
    CAUSES,
    MODES,
    Row,
    ask_set,
    cause_of,
    evaluate,
    fit,
    fit_generic,
    fit_rows,
    fit_single,
    keys_of,
    pick_threshold,
    pick_thresholds,
    prefixes_of,
    replay,
    reread_scope,
)
from rtgate.apps.autocomplete.engine import FAST_WINDOW_CHARS, MAX_PREFIX_CHARS, EngineConfig
from rtgate.apps.autocomplete.sessions import lexicon
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.core.trace import why_of
from rtgate.domains.loader import Ask, load_judge
from tests.apps.autocomplete.ac_helpers import engine_with

SIMPLE = Ask("我想查一下我的账单明细", "zh", "simple", "bill_query")
MULTI = Ask("我的卡丢了，挂失以后自动还款还会扣吗？年费退不退？补卡要多久？", "zh", "multi")


async def test_only_prefixes_the_engine_may_delegate_are_kept(
    reader: Reader, gated: BackgroundOnly
) -> None:
    lex = lexicon(["我想查一下我的账单明细", "how do i pay my bill"])
    ask = Ask("how do i pay my bill on time", "en", "simple", "repayment")
    async with engine_with(reader, cloud=gated) as engine:
        zh = prefixes_of(SIMPLE, lex, 0, engine)
        en = prefixes_of(ask, lex, 0, engine)
    assert zh and all(len(p) >= 6 for p in zh) and zh[-1] == SIMPLE.text
    assert en[0] == "how do i pay " and en[-2] == "how do i pay my bill on "  # at spaces
    assert en[-1] == ask.text  # and the whole ask, once, at the pause
    cfg = EngineConfig(cloud_min_words=6)
    async with engine_with(reader, cloud=gated, config=cfg) as engine:
        typing = ["how do i pay my bill ", "how do i pay my bill on "]
        assert prefixes_of(ask, lex, 0, engine) == [*typing, ask.text]
        short = Ask("weather today", "en", "ood")
        assert prefixes_of(short, lex, 0, engine) == ["weather today"]


def test_every_delegable_whole_ask_gets_a_row_at_the_pause() -> None:
    from rtgate.apps.autocomplete.abstention import _flagged

    lex = lexicon(["我想查一下我的账单明细", "how do i pay my bill"])
    cfg = EngineConfig()
    zh = _flagged(SIMPLE, lex, 0, cfg)  # typed whole as a delegable prefix, then paused
    assert zh[-2:] == [(SIMPLE.text, False), (SIMPLE.text, True)]
    assert [pause for _, pause in zh].count(True) == 1
    short = _flagged(Ask("weather today", "en", "ood"), lex, 0, cfg)
    assert short == [("weather today", True)]  # delegable only at the pause


def test_the_threshold_keeps_simple_asks_fast_first() -> None:
    asks = [SIMPLE, MULTI]
    rows = [
        Row(0, "a", "simple", "zh", [0.0] * 5, 1, False),
        Row(1, "b", "multi", "zh", [0.0] * 5, 0, False),
    ]
    # the multi ask scores 0.3, the simple one 0.2: no threshold delegates the multi ask
    # without the simple one too, so the simple ask wins
    t, shares, _ = pick_threshold(rows, asks, {0: 0.2, 1: 0.3}, min_fast=1.0)
    assert t <= 0.2 and shares == {"complex_delegated": 0.0, "simple_fast": 1.0}
    t, shares, _ = pick_threshold(rows, asks, {0: 0.6, 1: 0.3}, min_fast=1.0)
    assert 0.3 < t <= 0.6 and shares == {"complex_delegated": 1.0, "simple_fast": 1.0}


def test_a_scope_bar_delegates_what_the_threshold_cannot() -> None:
    asks = [SIMPLE, MULTI]
    rows = [
        Row(0, "a", "simple", "zh", [0.0, 0.0, 0.0, 0.1, 0.2], 1, False),
        Row(1, "b", "multi", "zh", [0.0, 0.0, 0.0, 0.99, 0.0], 0, False),
    ]
    # p says the multi ask is the likelier right (0.3 > 0.2); its scope reads multi at 0.99
    t, shares, bars = pick_threshold(
        rows, asks, {0: 0.2, 1: 0.3}, min_fast=1.0, bar_grid=(0.5, 0.95, math.inf)
    )
    assert shares == {"complex_delegated": 1.0, "simple_fast": 1.0}
    assert bars == (0.95, math.inf) and t <= 0.2  # the highest bars that do it


async def test_evaluate_counts_per_ask(reader: Reader, gated: BackgroundOnly) -> None:
    async with engine_with(reader, cloud=gated) as engine:
        report = await evaluate(engine, [SIMPLE, MULTI])
    zh = report["zh"]
    assert zh["multi"] == {"n": 1, "delegated": 1.0}
    assert zh["simple"] == {"n": 1, "delegated": 0.0} and zh["simple_fast"] == 1.0
    assert report["all"]["complex_delegated"] == 1.0
    assert report["simple_prefixes"] > 0 and 0.0 <= report["simple_top3"] <= 1.0
    assert report["over_budget"] >= 0 and report["calibration"]["n"] > 0
    assert report["pauses"]["n"] >= 1  # the simple ask, judged whole when typing stopped


async def test_an_ask_longer_than_the_fast_window_is_typed_whole(
    reader: Reader, gated: BackgroundOnly
) -> None:
    # a long personal ask (a blind set had 15 past the fast window): the replay types it
    # to its end, and past the window the engine sends it to the big model
    story = "I was charged twice at the same hotel in Lisbon last week and the app shows both "
    long_ = Ask(story * 4 + "how do I dispute the second charge?", "en", "simple", "dispute")
    assert FAST_WINDOW_CHARS < len(long_.text) <= MAX_PREFIX_CHARS
    keys = keys_of(long_.text, lexicon([long_.text]), random.Random(0))
    assert keys[-1] == long_.text
    async with engine_with(reader, cloud=gated) as engine:
        report = await evaluate(engine, [SIMPLE, long_], per_ask=True)
    assert report["beyond_window"] == 1 and report["cut_at_limit"] == 0
    assert report["en"]["simple"]["n"] == 1
    assert report["asks"][1]["delegated"] is True  # at the latest past the window


def _asks_file(tmp_path: Path) -> Path:
    rows = [
        ("我想查一下我的账单明细", "simple", "bill_query"),
        ("信用卡怎么激活呀", "simple", "activation"),
        ("我的卡丢了怎么挂失", "simple", "card_loss"),
        ("how do i activate my new card today", "simple", "activation"),
        ("i want to see my statement for last month please", "simple", "bill_query"),
        ("can i split this purchase into monthly installments", "simple", "installment"),
        ("如果我这个月只还最低还款，利息怎么算，会不会影响征信", "multi", None),
        ("我的卡丢了，挂失以后自动还款还会扣吗？年费退不退？", "multi", None),
        ("帮我订一张明天去上海的高铁票，要靠窗的座位", "ood", None),
        ("if i pay only the minimum now and the rest later, what interest do i pay and when",
         "multi", None),
        ("lost my card abroad, can you freeze it and also waive the fee and raise my limit",
         "multi", None),
        ("what is the best recipe for a chocolate cake with no eggs at all", "ood", None),
    ]  # fmt: skip
    path = tmp_path / "asks.jsonl"
    lines = [
        json.dumps({"text": t, "lang": "zh" if ord(t[0]) > 127 else "en", "kind": k, "intent": i})
        for t, k, i in rows
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_fitting_a_judge_on_a_few_asks(tmp_path: Path) -> None:
    judge, report = fit(_asks_file(tmp_path))
    assert 0.0 < judge.threshold < 1.0 and report["n_asks"] == 12
    assert report["n_labelled"] > 0 and 0.0 <= report["out_of_fold"]["ece"] <= 1.0
    out = tmp_path / "judge.json"
    judge.save(out)
    again = load_judge(path=out)
    assert again.threshold == judge.threshold and again.scope is not None
    assert again.scope_bars == judge.scope_bars
    generic, g = fit_generic(_asks_file(tmp_path))
    assert generic.ranker is None and g["n_asks"] == 12 and 0.0 <= generic.threshold <= 1.0


def test_a_judge_may_be_fitted_on_several_ask_files(tmp_path: Path) -> None:
    first = _asks_file(tmp_path)
    (tmp_path / "more").mkdir()
    second = _asks_file(tmp_path / "more").rename(tmp_path / "more.jsonl")
    judge, report = fit([first, second], pick_on=[first.name])
    assert report["asks"] == ["asks.jsonl", "more.jsonl"] and report["n_asks"] == 24
    assert report["picked_on"] == ["asks.jsonl"] and set(report["out_of_fold"]["per_set"]) == {
        "asks.jsonl",
        "more.jsonl",
    }
    assert judge.meta["fitted_on"] == ["asks.jsonl", "more.jsonl"] and judge.scope is not None


def test_an_unknown_ask_set_is_a_clear_error() -> None:
    from typer.testing import CliRunner

    from rtgate.__main__ import app

    result = CliRunner().invoke(app, ["bench", "abstention", "--sets", "nope"])
    assert result.exit_code == 2 and "unknown ask set" in result.output
    for reads, says in (("view,view", "three readings"), ("text,all,view", "unknown reading")):
        result = CliRunner().invoke(app, ["bench", "abstention", "--sets", "val", "--reads", reads])
        assert result.exit_code == 2 and says in result.output
    result = CliRunner().invoke(app, ["bench", "abstention", "--sets", "val", "--point", "best"])
    assert result.exit_code == 2 and "unknown operating point" in result.output


def test_an_ask_set_may_be_a_file(tmp_path: Path) -> None:
    path = _asks_file(tmp_path)
    assert ask_set(str(path)) == path and ask_set("val2").name == "asks-val2.jsonl"


def test_the_cause_of_a_cloud_job_is_read_from_the_trace() -> None:
    def trace(abstained: str | None = None, *attempts: tuple[str, str, str]) -> dict[str, object]:
        rows = [{"tier": t, "outcome": o, "detail": d} for t, o, d in attempts]
        return {"abstained": abstained, "attempts": rows, "degraded": None}

    vetoed = "local not trusted alone (p=0.40 >= 0.09 (vetoed): scope bar reached, 3 clauses)"
    assert cause_of(trace(vetoed)) == "scope_bar"
    assert cause_of(trace("local not trusted alone (p=0.05 < 0.09: 2 intents)")) == "judge"
    semantic = "local not trusted alone (p=0.95 >= 0.09 (vetoed): semantic scope 0.91)"
    assert cause_of(trace(semantic)) == "semantic"
    weighed = "local not trusted alone (p=0.05 < 0.20: semantic scope 0.91 weighed with the judge's"
    weighed += " p=0.64)"
    assert cause_of(trace(weighed)) == "judge_semantic"
    complex_ = ("local", "declined", "local: a complex ask (p=0.80)")
    assert cause_of(trace(None, complex_)) == "declined_complex"
    unknown = ("local", "declined", "local: unknown ask (p=0.10)")
    assert cause_of(trace(None, unknown)) == "declined_unknown"
    assert cause_of(trace(None, ("template", "declined", ""), ("local", "cut_off", ""))) == "budget"
    assert cause_of(trace(None, ("local", "skipped", "40.0 ms left"))) == "budget"


async def test_evaluate_says_why_each_delegated_ask_went(
    reader: Reader, gated: BackgroundOnly
) -> None:
    async with engine_with(reader, cloud=gated) as engine:
        report = await evaluate(engine, [SIMPLE, MULTI], per_ask=True)
    causes = report["zh"]["by_cause"]
    assert causes["simple"] == {} and sum(causes["multi"].values()) == 1
    (cause,) = causes["multi"]
    assert cause.split("@")[0] in CAUSES
    multi = report["asks"][1]
    assert multi["cause"] == cause and MULTI.text.startswith(multi["by_prefix"])
    assert isinstance(multi["why"], str) and multi["why"]  # the trace's line for it
    assert report["asks"][0]["cause"] is None and report["asks"][0]["by_prefix"] is None
    assert report["asks"][0]["why"] is None


def test_the_line_of_a_trace_that_says_why_its_job_started() -> None:
    judged = {"abstained": "local not trusted alone (p=0.10 < 0.83: 2 intents)",
              "degraded": "x", "attempts": [{"tier": "local", "outcome": "declined",
                                             "detail": "local: unknown ask"}]}  # fmt: skip
    assert why_of(judged) == judged["abstained"]
    declined = {"degraded": "silent", "attempts": [
        {"tier": "template", "outcome": "declined", "detail": "no template"},
        {"tier": "local", "outcome": "declined", "detail": "local: a complex ask (p=0.80)"},
        {"tier": "cache", "outcome": "miss", "detail": "not seen"}]}  # fmt: skip
    assert why_of(declined) == "no template; local: a complex ask (p=0.80)"
    assert why_of({"degraded": "no fast tier within the budget"}).startswith("no fast tier")
    assert why_of({}) == ""


def test_four_thresholds_are_chosen_together_keeping_simple_asks_fast() -> None:
    # asks 0-1 simple, 2-4 complex; the lowest probability per ask and mode (MODES)
    low = np.array([
        [0.9, 0.6, 0.9, 0.9],
        [0.8, 0.9, 0.9, 0.7],
        [0.9, 0.3, 0.9, 0.9],  # caught only with the semantic reading, typed
        [0.9, 0.9, 0.9, 0.2],  # ... or at the pause
        [0.5, 0.9, 0.9, 0.9],  # ... or without it, typed
    ])  # fmt: skip
    simple = np.array([True, True, False, False, False])
    anyway = np.zeros(5, dtype=bool)
    t, shares = pick_thresholds(low, anyway, simple, min_fast=1.0)
    assert shares == {"complex_delegated": 1.0, "simple_fast": 1.0}
    assert 0.5 < t[0] <= 0.8 and 0.3 < t[1] <= 0.6 and 0.2 < t[3] <= 0.7
    # a simple ask no fast tier answered goes whatever the judge says: min_fast counts the
    # simple asks the judge could keep, and the shares count it as gone
    anyway[0] = True
    t, shares = pick_thresholds(low, anyway, simple, min_fast=1.0)
    assert shares == {"complex_delegated": 1.0, "simple_fast": 0.5} and 0.2 < t[3] <= 0.7
    # no threshold keeps ask 1 fast and delegates ask 3 at the pause: ask 1 wins
    low[1, 3] = 0.1
    anyway[0] = False
    t, shares = pick_thresholds(low, anyway, simple, min_fast=1.0)
    assert shares == {"complex_delegated": 0.6667, "simple_fast": 1.0} and t[3] <= 0.1


def test_a_single_judge_is_fitted_out_of_fold_and_replays_its_choice() -> None:
    from rtgate.tiers.answerability import SCOPE_LOGITS, feature_names

    n_in = len(feature_names()) + len(SCOPE_LOGITS)
    rng = np.random.default_rng(0)
    asks: list[Ask] = []
    rows: list[Row] = []
    for k in range(60):
        kind = "simple" if k % 2 == 0 else "ood"
        asks.append(Ask(f"ask {k}", "en", kind, "bill_query" if kind == "simple" else None))  # type: ignore[arg-type]
        for j in range(3):
            x = list(rng.normal(size=n_in))
            x[-1] = (-3.0 if kind == "simple" else 3.0) + rng.normal()  # logit_ood tells
            label = 1 if kind == "simple" else (0 if j > 0 else None)
            rows.append(Row(k, f"ask {k} {j}", kind, "en", x, label, False, j == 2,
                            0.1 if kind == "simple" else 0.8))  # fmt: skip
    judge, report = fit_single(
        {"a": (asks, rows)}, min_fast=0.95, bar_grid=(math.inf,), local={"complex_p": None}
    )
    assert judge.meta["local"] == {"complex_p": None} and report["picked_on"] == ["a"]
    assert judge.weighs_semantic and judge.scope_bars == {}
    oof = report["out_of_fold"]
    assert oof["simple_fast"] >= 0.95 and oof["complex_delegated"] >= 0.9
    assert 0.0 <= oof["typed"]["ece"] <= 1.0 and oof["semantic"]["n"] == 150
    assert set(report["thresholds"]) == set(MODES)
    again = replay(judge, asks, rows)  # in sample: at least as good as out of fold
    assert again["complex_delegated"] >= 0.9 and again["simple_fast"] >= 0.95
    assert again["en"] == {k: again[k] for k in ("complex_delegated", "simple_fast")}


def test_the_thresholds_may_be_chosen_on_some_of_the_fitting_sets() -> None:
    from rtgate.tiers.answerability import SCOPE_LOGITS, feature_names

    n_in = len(feature_names()) + len(SCOPE_LOGITS)
    rng = np.random.default_rng(1)

    def one_set(noisy: bool) -> tuple[list[Ask], list[Row]]:
        asks: list[Ask] = []
        rows: list[Row] = []
        for k in range(40):
            kind = "simple" if k % 2 == 0 else "ood"
            asks.append(Ask(f"ask {k}", "en", kind, "bill_query" if kind == "simple" else None))  # type: ignore[arg-type]
            x = list(rng.normal(size=n_in))
            x[-1] = (-2.0 if kind == "simple" else 2.0) + rng.normal(scale=3.0 if noisy else 0.3)
            rows.append(Row(k, f"ask {k}", kind, "en", x, int(kind == "simple"), False, True, 0.5))
        return asks, rows

    clean, noisy = one_set(False), one_set(True)
    _, both = fit_single({"clean": clean, "noisy": noisy}, min_fast=1.0, bar_grid=(math.inf,))
    _, mine = fit_single({"clean": clean, "noisy": noisy}, min_fast=1.0, bar_grid=(math.inf,),
                         pick_on=["clean"])  # fmt: skip
    assert mine["picked_on"] == ["clean"]
    # chosen on the clean asks alone, the bar keeps them fast and may give up the noisy ones
    assert mine["out_of_fold"]["per_set"]["clean"]["simple_fast"] == 1.0
    assert (mine["out_of_fold"]["per_set"]["clean"]["complex_delegated"]
            > both["out_of_fold"]["per_set"]["clean"]["complex_delegated"])  # fmt: skip


class _Scope:
    """A scope reader that reads every text the same: what :func:`reread_scope` puts in."""

    classes: tuple[str, ...] = ("simple", "multi", "ood")
    blocking = False

    def rank(self, text: str) -> list[tuple[str, float]]:
        return [("simple", 0.7), ("multi", 0.2), ("ood", 0.1)]


def test_a_training_set_is_read_by_a_scope_classifier_that_did_not_learn_it() -> None:
    from rtgate.tiers.answerability import SCOPE_LOGITS, feature_names

    n_in = len(feature_names())
    plain = Row(0, "my card", "simple", "en", [0.5] * n_in, 1, False)
    logits = Row(0, "my card", "simple", "en", [0.5] * (n_in + len(SCOPE_LOGITS)), 1, False)
    none = Row(0, "my card", "simple", "en", None, None, True)
    reread_scope([plain, logits, none], _Scope())
    assert plain.x is not None and plain.x[3:5] == [0.2, 0.1] and plain.x[5] == 0.5
    assert logits.x is not None and logits.x[3:5] == [0.2, 0.1]
    assert logits.x[n_in:] == pytest.approx([math.log(0.2 / 0.8), math.log(0.1 / 0.9)])
    assert none.x is None


def test_a_scope_classifier_may_leave_a_training_set_out() -> None:
    from rtgate.domains.loader import load_asks, scope_ask_files, scope_examples

    left = scope_ask_files()[-1]
    one = load_asks(left)[1].text
    every = {e.text for e in scope_examples()}
    without = {e.text for e in scope_examples(leave_out=(left.name,))}
    assert one in every and one not in without and without < every


def _set(rng: np.random.Generator, noise: float, n: int = 40) -> tuple[list[Ask], list[Row]]:
    """Asks whose first scope reading (multi) tells their kind, as sure as ``noise`` lets."""
    from rtgate.tiers.answerability import feature_names

    asks: list[Ask] = []
    rows: list[Row] = []
    for k in range(n):
        kind = "simple" if k % 2 == 0 else "multi"
        asks.append(Ask(f"ask {k}", "en", kind, "bill_query" if kind == "simple" else None))  # type: ignore[arg-type]
        for j in range(2):
            x = list(rng.normal(size=len(feature_names())))
            x[3] = min(0.98, max(0.0, (0.1 if kind == "simple" else 0.9) + rng.normal(0, noise)))
            rows.append(Row(k, f"ask {k} {j}", kind, "en", x, int(kind == "simple"), False, j == 1))
    return asks, rows


def test_a_judge_is_fitted_on_several_sets_and_chosen_on_some() -> None:
    rng = np.random.default_rng(3)
    sets = {"clean.jsonl": _set(rng, 0.05), "noisy.jsonl": _set(rng, 0.6)}
    judge, both = fit_rows(sets, min_fast=1.0)
    assert both["asks"] == ["clean.jsonl", "noisy.jsonl"] and both["n_asks"] == 80
    assert both["n_labelled"] == 160 and set(both["out_of_fold"]["per_set"]) == set(sets)
    assert judge.meta["fitted_on"] == ["clean.jsonl", "noisy.jsonl"] and judge.ranker is None
    assert judge.probability([0.0, 0.0, 0.0, 0.1, *[0.0] * 15]) > judge.probability(
        [0.0, 0.0, 0.0, 0.9, *[0.0] * 15]
    )  # a multi-part reading weighs against the fast answer
    _, mine = fit_rows(sets, min_fast=1.0, pick_on=["clean.jsonl"])
    assert mine["picked_on"] == ["clean.jsonl"]
    clean = mine["out_of_fold"]["per_set"]["clean.jsonl"]
    # chosen on the clean asks alone, every simple one stays fast and more complex ones go
    assert clean["simple_fast"] == 1.0
    assert (
        clean["complex_delegated"]
        >= both["out_of_fold"]["per_set"]["clean.jsonl"]["complex_delegated"]
    )


def test_the_picked_shares_are_those_of_the_rows_rule() -> None:
    from rtgate.apps.autocomplete.abstention import _per_ask, _shares, pick_pause_threshold

    rng = np.random.default_rng(5)
    asks = [Ask(f"ask {k}", "en", "simple" if k % 3 else "multi",
                "bill_query" if k % 3 else None) for k in range(30)]  # fmt: skip
    rows: list[Row] = []
    p: dict[int, float] = {}
    for k in range(30):
        for j in range(int(rng.integers(0, 4))):  # some asks have no row at all
            answered = rng.random() > 0.2
            x = [0.0, 0.0, 0.0, float(rng.random()), float(rng.random())] if answered else None
            if answered:
                p[len(rows)] = float(rng.random()) * (0.6 if k % 3 == 0 else 1.0)
            rows.append(Row(k, f"{k} {j}", asks[k].kind, "en", x, None,
                            not answered and rng.random() > 0.5, j == 2))  # fmt: skip
    for min_fast in (0.5, 0.8, 1.0):
        t, shares, bars = pick_threshold(rows, asks, p, min_fast=min_fast,
                                         bar_grid=(0.7, 0.9, math.inf))  # fmt: skip
        assert shares == _shares(asks, _per_ask(rows, p, t, bars))
        tp, paused = pick_pause_threshold(rows, asks, p, t, bars, min_fast=min_fast)
        assert tp >= t and paused == _shares(asks, _per_ask(rows, p, t, bars, tp))
