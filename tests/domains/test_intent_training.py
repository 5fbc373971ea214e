"""What the autocomplete reader's classifier learns: the corpus, its lead-in variants and
the simple asks of the ask sets ``intent-asks.json`` names (session 17, #20); what the scope
classifiers learn beside their own data: every ask of the sets ``scope-asks.json`` names
(session 18, #20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtgate.apps.autocomplete.engine import build_reader
from rtgate.apps.autocomplete.pool import CandidatePool
from rtgate.core.errors import ConfigError
from rtgate.domains.loader import (
    CORPUS_ASKS,
    INTENT_ASKS,
    SCOPE_ASKS,
    TELECOM_DIR,
    classifier_examples,
    corpus_ask_files,
    corpus_digest,
    intent_ask_files,
    load_asks,
    load_classifier,
    load_corpus,
    load_intent_asks,
    load_reader_classifier,
    load_templates,
    reader_digest,
    reader_examples,
    reader_model_path,
    scope_ask_files,
    scope_digest,
    scope_examples,
    scope_path,
    semantic_scope_examples,
)
from rtgate.tiers.classifier import IntentClassifier

_CORPUS = [
    ("想把这笔消费分期", "installment", "zh"), ("账单能分几期", "installment", "zh"),
    ("can I split this purchase into instalments", "installment", "en"),
    ("pay my statement in monthly instalments", "installment", "en"),
    ("卡丢了怎么挂失", "card_loss", "zh"), ("信用卡被偷了", "card_loss", "zh"),
    ("I lost my card", "card_loss", "en"), ("my card was stolen, freeze it", "card_loss", "en"),
]  # fmt: skip


def _domain(tmp_path: Path) -> Path:
    """A two-intent domain: a corpus and its intents, nothing trained."""
    d = tmp_path / "mini"
    d.mkdir()
    entries: dict[str, dict[str, str]] = {"installment": {}, "card_loss": {}}
    intents = {"intents": entries}
    (d / "intents.json").write_text(json.dumps(intents), encoding="utf-8")
    rows = [json.dumps({"text": t, "intent": i, "lang": lang}) for t, i, lang in _CORPUS]
    (d / "corpus.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return d


def _asks(
    d: Path, rows: list[tuple[str, str, str, str | None]], name: str = "asks-x.jsonl"
) -> Path:
    lines = [
        json.dumps({"text": t, "lang": lang, "kind": k, "intent": i}) for t, lang, k, i in rows
    ]
    (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / INTENT_ASKS).write_text(json.dumps({"asks": [name]}), encoding="utf-8")
    return d / name


def test_the_shipped_sets_are_learned_and_the_checked_ones_are_not() -> None:
    names = {f.name for f in intent_ask_files()}
    assert "asks-train2.jsonl" in names and len(names) == 28
    assert {"asks-eval18-zh.jsonl", "asks-eval19-en.jsonl"} <= names  # played, moved in (s25)
    assert {"asks-eval20-zh.jsonl", "asks-eval23-en.jsonl"} <= names  # played, moved in (s29)
    assert {"asks-eval25-zh.jsonl", "asks-eval25-en.jsonl"} <= names  # played, moved in (s30)
    # the judge's fitting set and every set kept for checking stay out of the reader
    for kept in ("tune", "val", "val2", "val3", "eval6", "eval9", "eval10"):
        assert f"asks-{kept}.jsonl" not in names
    simple = sum(a.kind == "simple" for f in intent_ask_files() for a in load_asks(f))
    assert len(load_intent_asks()) == simple > 2000


def test_the_shipped_reader_model_is_what_the_data_says() -> None:
    model = IntentClassifier.load(reader_model_path())
    assert model.meta["reader_sha256"] == reader_digest(), "retrain: rtgate intents reader"
    assert model.meta["n_examples"] == len(reader_examples())
    # a long, personal ask of the kind the corpus lacks (written for this test)
    ask = "my dentist bill came to 2,700 after a root canal and I paid on the card, what"
    assert "installment" in [k for k, _ in model.rank(ask)[:3]]


def test_suggestions_stay_the_corpus_while_the_classifier_learns_the_asks() -> None:
    reader = build_reader()
    extra = [(c.text, c.intent) for t in load_templates().templates for c in t.candidates]
    pool = CandidatePool(load_corpus(), extra)  # what was suggested before the asks
    assert [e.text for e in reader.pool.all] == [e.text for e in pool.all]
    assert isinstance(reader.classifier, IntentClassifier)
    assert reader.classifier.meta["n_examples"] == len(reader_examples())


def test_a_domain_without_the_file_learns_its_corpus_only(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    assert intent_ask_files(d) == [] and load_intent_asks(d) == []
    assert len(reader_examples(d)) == len(_CORPUS) + len(_CORPUS) // 3 + 1  # and lead-ins


def test_simple_asks_are_learned_with_their_intent_and_the_others_not(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    _asks(d, [
        ("my dentist bill was 2,700 and I paid on the card, can I spread it out", "en",
         "simple", "installment"),
        ("freeze my card and tell me my balance", "en", "multi", None),
        ("what is the weather tomorrow", "en", "ood", None),
    ])  # fmt: skip
    got = [(e.text[:9], e.intent, e.lang) for e in load_intent_asks(d)]
    assert got == [("my dentis", "installment", "en")]
    assert reader_examples(d)[-1].text.startswith("my dentist")


def test_a_changed_ask_set_makes_the_shipped_file_stale(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    _asks(d, [("想把这笔一万二的家具分十二期", "zh", "simple", "installment")])
    load_reader_classifier(d).save(reader_model_path(d))  # no file yet: trained now
    before = reader_digest(d)
    assert IntentClassifier.load(reader_model_path(d)).meta["reader_sha256"] == before
    _asks(d, [("想把这笔一万二的家具分六期", "zh", "simple", "installment")])
    assert reader_digest(d) != before
    assert load_reader_classifier(d).meta["reader_sha256"] == reader_digest(d)


def test_a_manifest_s_comment_is_not_what_is_learned(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    _asks(d, [("想把这笔一万二的家具分十二期", "zh", "simple", "installment")])
    (d / "calls-x.jsonl").write_text(json.dumps(
        {"text": "卡丢了想补一张", "lang": "zh", "kind": "simple", "topic": "card_loss"}
    ) + "\n", encoding="utf-8")  # fmt: skip
    (d / CORPUS_ASKS).write_text(json.dumps({"asks": ["calls-x.jsonl"]}), encoding="utf-8")
    reader, corpus = reader_digest(d), corpus_digest(d)
    # the comments say why a set is learned; rewording them learns nothing new (session 31:
    # a reworded comment made the shipped reader stale, retrained at every start)
    for name, sets in ((INTENT_ASKS, ["asks-x.jsonl"]), (CORPUS_ASKS, ["calls-x.jsonl"])):
        doc = {"_comment": "learned since this session, for its callers' words", "asks": sets}
        (d / name).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    assert (reader_digest(d), corpus_digest(d)) == (reader, corpus)
    # what the manifests name is: a set left out, or the same set under another name
    (d / INTENT_ASKS).write_text(json.dumps({"asks": []}), encoding="utf-8")
    assert reader_digest(d) != reader
    (d / "asks-y.jsonl").write_bytes((d / "asks-x.jsonl").read_bytes())
    (d / INTENT_ASKS).write_text(json.dumps({"asks": ["asks-y.jsonl"]}), encoding="utf-8")
    assert reader_digest(d) != reader


@pytest.mark.parametrize(
    ("content", "error"),
    [("{not json", "malformed"), ('{"asks": "asks-x.jsonl"}', "list of file names"),
     ('{"asks": ["asks-missing.jsonl"]}', "no such ask set")],
)  # fmt: skip
@pytest.mark.parametrize(("manifest", "files"), [(INTENT_ASKS, intent_ask_files),
                                                 (SCOPE_ASKS, scope_ask_files),
                                                 (CORPUS_ASKS, corpus_ask_files)])  # fmt: skip
def test_a_bad_file_is_refused_with_a_clear_error(
    tmp_path: Path, content: str, error: str, manifest: str, files: object
) -> None:
    d = _domain(tmp_path)
    (d / manifest).write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=error):
        files(d)  # type: ignore[operator]


def test_an_ask_with_an_intent_the_domain_lacks_is_refused(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    _asks(d, [("cancel my gym", "en", "simple", "gym_membership")])
    with pytest.raises(ConfigError, match="known intent"):
        load_intent_asks(d)


def test_the_scope_classifiers_learn_played_sets_and_not_the_checked_ones() -> None:
    names = {f.name for f in scope_ask_files()}
    assert {"asks-train2.jsonl", "asks-train3.jsonl", "asks-eval9.jsonl"} <= names
    # the judge's fitting set (read out of sample) and the sets kept for checking stay out
    for kept in ("tune", "val", "val2", "val3", "eval6"):
        assert f"asks-{kept}.jsonl" not in names
    model = IntentClassifier.load(scope_path())
    assert model.meta["data_sha256"] == scope_digest(), "retrain: rtgate intents judge"


def test_every_kind_of_a_scope_set_is_learned_whole_and_a_late_prefix(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    assert scope_ask_files(d) == []
    alone = {e.text for e in scope_examples(d)}
    rows = [("my dentist bill was 2,700 and I paid on the card, can I spread it out", "en",
             "simple", "installment"),
            ("freeze my card and tell me my balance", "en", "multi", None),
            ("what is the weather tomorrow", "en", "ood", None)]  # fmt: skip
    _asks(d, rows)
    (d / SCOPE_ASKS).write_text(json.dumps({"asks": ["asks-x.jsonl"]}), encoding="utf-8")
    got = {(e.text, e.intent) for e in scope_examples(d)}
    for text, _, kind, _ in rows:
        assert (text, kind) in got and text not in alone
    assert ("freeze my", "multi") not in got  # an early prefix of a multi-part ask is not one
    semantic, groups = semantic_scope_examples(d)
    assert {(t, k) for t, _, k, _ in rows} <= {(e.text, e.intent) for e in semantic}
    assert len(groups) == len(semantic)


def test_a_changed_scope_set_changes_the_digest(tmp_path: Path) -> None:
    d = _domain(tmp_path)
    _asks(d, [("卡丢了还欠多少钱", "zh", "multi", None)])
    (d / SCOPE_ASKS).write_text(json.dumps({"asks": ["asks-x.jsonl"]}), encoding="utf-8")
    before = scope_digest(d)
    _asks(d, [("卡丢了，顺便查下账单", "zh", "multi", None)])
    assert scope_digest(d) != before


def test_a_call_set_of_another_domain_is_learned_by_its_topics(tmp_path: Path) -> None:
    d = _domain(tmp_path)  # its intents are its own (intents.json), not the cards domain's
    calls: list[dict[str, Any]] = [
             {"text": "卡丢了想补一张", "lang": "zh", "kind": "simple", "topic": "card_loss"},
             {"text": "卡丢了，还有分期怎么办", "lang": "zh", "kind": "multi",
              "topic": ["card_loss", "installment"]}]  # fmt: skip
    (d / "calls-x.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls), "utf-8")
    (d / SCOPE_ASKS).write_text(json.dumps({"asks": ["calls-x.jsonl"]}), encoding="utf-8")
    got = {(e.text, e.intent) for e in scope_examples(d)}
    assert ("卡丢了想补一张", "simple") in got and ("卡丢了，还有分期怎么办", "multi") in got
    bad = {**calls[0], "topic": "bill_query"}  # a cards intent, unknown to this domain
    (d / "calls-x.jsonl").write_text(json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="known intent"):
        scope_examples(d)


def test_the_domain_classifier_learns_the_simple_lines_its_manifest_names(
    tmp_path: Path,
) -> None:
    d = _domain(tmp_path)
    alone = corpus_digest(d)
    assert corpus_ask_files(d) == [] and len(classifier_examples(d)) == len(_CORPUS)
    calls: list[dict[str, Any]] = [
        {"text": "the wee card went missing at the chippy, can ye block it", "lang": "en",
         "kind": "simple", "topic": "card_loss"},
        {"text": "block my card and split the bill", "lang": "en", "kind": "multi",
         "topic": ["card_loss", "installment"]},
        {"text": "what time is the match", "lang": "en", "kind": "ood", "topic": None},
    ]  # fmt: skip
    (d / "calls-x.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls), "utf-8")
    (d / CORPUS_ASKS).write_text(json.dumps({"asks": ["calls-x.jsonl"]}), encoding="utf-8")
    got = classifier_examples(d)
    assert [(e.text[:12], e.intent) for e in got[len(_CORPUS) :]] == [("the wee card", "card_loss")]
    assert corpus_digest(d) != alone  # a model trained on the corpus alone is stale now
    model = load_classifier("ngram", data_dir=d)  # no file: trained now, on both
    assert model.meta["corpus_sha256"] == corpus_digest(d)
    calls[0]["text"] = "the wee card went missing at the chip shop, can ye block it"
    (d / "calls-x.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls), "utf-8")
    assert corpus_digest(d) != model.meta["corpus_sha256"]


def test_the_telecom_classifier_learns_played_calls_not_those_it_is_tuned_or_picked_on() -> None:
    from rtgate.apps.voice.kb_eval import CALL_SETS, PICKED_ON, TUNED_ON, load_calls

    names = {f.name for f in corpus_ask_files(TELECOM_DIR)}
    assert {"calls-eval4-en.jsonl", "calls-eval5-zh.jsonl"} <= names
    corpus = {e.text for e in load_corpus(TELECOM_DIR)}  # (short phrasings some calls share)
    learned = {e.text for e in classifier_examples(TELECOM_DIR)} - corpus
    assert learned
    for name in (*TUNED_ON, *PICKED_ON):  # the judge reads these out of sample
        assert not any(c.text in learned for c in load_calls(CALL_SETS[name]))
    shipped = load_classifier("ngram", data_dir=TELECOM_DIR)
    assert shipped.meta["corpus_sha256"] == corpus_digest(TELECOM_DIR), "rtgate voice kb build"
    assert corpus_ask_files() == []  # the cards domain's classifier learns its corpus only
