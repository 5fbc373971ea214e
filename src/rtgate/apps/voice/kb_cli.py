"""``rtgate voice kb build|eval``: the knowledge base the voice agent answers from first.

``build`` retrains the domain's classifiers and refits its judge and thresholds on its
tuning calls (:func:`rtgate.apps.voice.kb_eval.build`); ``eval`` reports the first answers
on the tuning and the held-out calls, separately (:func:`rtgate.apps.voice.kb_eval.run_sets`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["kb_app"]

kb_app = typer.Typer(no_args_is_help=True, help="The voice agent's knowledge base.")


@kb_app.command("build")
def build_cmd(
    data_dir: Annotated[Path | None, typer.Option(help="domain folder (default: telecom)")] = None,
) -> None:
    """Train intent-ngram.npz (on the corpus and the simple lines of the call sets
    corpus-asks.json names) and scope-ngram.npz; fit judge.json on calls-tune.jsonl,
    calls-val.jsonl and calls-tune2.jsonl and pick the thresholds there (out of fold), or,
    when the domain has a semantic reader (scope-e5.npz), with its pause bar on
    calls-eval.jsonl, calls-eval2.jsonl and calls-eval3.jsonl."""
    from rtgate.apps.voice.kb_eval import build
    from rtgate.domains.loader import TELECOM_DIR

    report = build(data_dir or TELECOM_DIR)
    at = report["at_the_point"]
    bar = report.get("semantic_pause_bar")
    typer.echo(
        f"wrote the classifiers and judge.json: min_confidence {report['min_confidence']}, "
        f"clause_confidence {report['clause_confidence']}, name_confidence "
        f"{report['name_confidence']}, judge threshold "
        f"{report['threshold']}"
        + ("" if bar is None else f", semantic pause bar {bar}")
        + f"; judge fitted on {report['n_calls']} calls ({report['fitted_on']}), out-of-fold "
        f"ECE {report['out_of_fold']['ece']:.3f}; picked on {report['picked_on']} "
        f"({at['n_calls']} calls): multi/ood followed up {at['multi_ood_followed_up']:.1%}, "
        f"simple right from the KB {at['simple_right_from_kb']:.1%}, wrong entries "
        f"{at['simple_wrong_entry']}, holds naming a topic of the call "
        f"{at['holds_naming_a_topic_of_the_call']} / another {at['holds_naming_another_topic']}"
    )


@kb_app.command("eval")
def eval_cmd(
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="a set of the domain (tune, val, tune2, eval, eval2, eval3, eval4-zh, …) or a "
            "file (default: all of them)",
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    corrections: Annotated[bool, typer.Option(help="apply the domain's ASR corrections")] = True,
) -> None:
    """First answers on the caller transcripts: on topic, followed up, from the KB."""
    from rtgate.apps.voice.kb_eval import CALL_SETS, call_set, run_sets, summary
    from rtgate.core.errors import ConfigError

    names = sets or list(CALL_SETS)
    for name in names:
        try:
            call_set(name)
        except ConfigError as e:
            raise typer.BadParameter(str(e)) from e
    report = run_sets(names, corrections=corrections)
    summary(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
