"""``rtgate guard …``: scan files, guard a live stream, list work orders, train, simulate."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from rtgate.apps.guard.audio import PcmReader, paced, read_wav, write_wav
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.features import HOP, RATE, Framer
from rtgate.apps.guard.pipeline import Guard
from rtgate.apps.guard.rt import realtime
from rtgate.apps.guard.rules import Rules
from rtgate.core.errors import InvalidRequest, RtgateError

__all__ = ["app", "scan_files"]

app = typer.Typer(help="Acoustic guard: a small detector stops the line; a model explains.")
console = Console(stderr=True)

RulesOpt = Annotated[Path | None, typer.Option("--rules", help="rules TOML file")]
ModelOpt = Annotated[Path | None, typer.Option("--model", help="detector ONNX file")]
DbOpt = Annotated[Path | None, typer.Option("--db", help="work-order SQLite file")]


def _fail(e: RtgateError) -> NoReturn:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


def scan_files(
    files: list[Path], rules: Rules | None = None, model: Path | None = None
) -> list[dict[str, Any]]:
    """Scan WAV files as fast as possible; per file its highest score and its stops."""
    det = Detector(model, n_streams=1)
    out = []
    for f in files:
        audio = read_wav(f)
        det.reset()
        guard = Guard(["scan"], rules, detector=det)
        n = len(audio) // HOP
        stops, top = [], 0.0
        for i in range(n):
            end = (i + 1) * HOP / RATE
            for ev in guard.process(audio[i * HOP : (i + 1) * HOP][None], end):
                stops.append({"t_ms": round(end * 1000), "score": ev.message.score})
            top = max(top, float(guard.last_scores[0]))
        out.append({"file": str(f), "max_score": round(top, 4), "stops": stops})
    return out


@app.command()
def scan(
    files: Annotated[list[Path], typer.Argument(help="WAV files (any rate, first channel)")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write results here")] = None,
    rules: RulesOpt = None,
    model: ModelOpt = None,
) -> None:
    """Scan WAV files as fast as possible and report the stops each would cause."""
    try:
        res = scan_files(files, Rules.load(rules) if rules else None, model)
    except RtgateError as e:
        _fail(e)
    table = Table("file", "max score", "stops (ms)")
    for r in res:
        table.add_row(
            r["file"], f"{r['max_score']:.3f}", ", ".join(str(s["t_ms"]) for s in r["stops"])
        )
    console.print(table)
    text = json.dumps(res, ensure_ascii=False, indent=1)
    if json_out is not None:
        json_out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


Windows = Iterator[tuple[np.ndarray, float, np.ndarray | None]]
"""``(windows (rows, 320), window_end_ts, rows)``: ``rows`` None means every station."""


def _windows_of_files(paths: list[Path]) -> Windows:
    """One station per file, replayed together in real time; a station whose file has ended
    drops out of the ticks (its rows are left out)."""
    audio = [read_wav(p) for p in paths]
    n = [len(a) // HOP for a in audio]
    rows = np.arange(len(paths))

    def ticks() -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for t in range(max(n, default=0)):
            live = rows[[t < k for k in n]]
            w = np.stack([audio[i][t * HOP : (t + 1) * HOP] for i in live])
            yield w, None if len(live) == len(paths) else live

    for (w, live), end_ts in paced(ticks()):
        yield w, end_ts, live


def _framed(chunks: Iterable[tuple[np.ndarray, float]]) -> Windows:
    """``(chunk (stations, n), arrival_ts)`` from stdin or a sound card, cut into windows
    stamped from their chunk's arrival; every station in each."""
    framer = Framer()
    for chunk, arrival in chunks:
        for w, end_ts in framer.push(chunk, arrival):
            yield w, end_ts, None


def _stations(
    sources: list[str], names: list[str] | None, channels: int
) -> tuple[list[str], list[Path] | None]:
    """Station names and, unless the source is stdin or a sound card (no sources), files."""
    if sources in (["-"], []):
        if names and len(names) not in (1, channels):
            raise InvalidRequest(
                f"{len(names)} stations for {channels} channels: give one (channel 0) "
                "or one per channel"
            )
        default = ["station"] if channels == 1 else [f"ch{i}" for i in range(channels)]
        return names or default, None
    if "-" in sources:
        raise InvalidRequest("stdin (-) cannot be mixed with files")
    missing = [f for f in sources if not Path(f).is_file()]
    if missing:
        raise InvalidRequest(f"no such file: {', '.join(missing)}")
    files = [Path(s) for s in sources]
    if names and len(names) != len(files):
        raise InvalidRequest(f"{len(names)} station names for {len(files)} files")
    chosen = names or [f.stem for f in files]
    if len(set(chosen)) != len(chosen):
        raise InvalidRequest(f"station names must be unique, got {chosen}")
    return chosen, files


@app.command()
def run(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="WAV files, one station each (replayed in real time), or - (stdin); "
            "none with --device"
        ),
    ] = None,
    broker: Annotated[str, typer.Option(help="mqtt://HOST:PORT")] = "mqtt://127.0.0.1:1883",
    topic: Annotated[
        str | None, typer.Option(help="stop topic, {station} allowed (default: from the rules)")
    ] = None,
    station: Annotated[
        list[str] | None,
        typer.Option(help="station name; repeat: one per file or per stdin channel"),
    ] = None,
    rate: Annotated[int, typer.Option(help="stdin or sound card sample rate")] = RATE,
    channels: Annotated[int, typer.Option(help="stdin or sound card channels")] = 1,
    device: Annotated[
        str | None,
        typer.Option(help="sound card (PortAudio name or index; the soundcard extra)"),
    ] = None,
    seconds: Annotated[
        float | None, typer.Option(help="sound card: stop after this much audio")
    ] = None,
    device_buffer_s: Annotated[
        float, typer.Option(help="sound card: audio that may wait before blocks are dropped")
    ] = 2.0,
    rules: RulesOpt = None,
    model: ModelOpt = None,
    db: DbOpt = None,
    llm: Annotated[bool, typer.Option(help="let the local language model explain")] = True,
    failsafe_cmd: Annotated[
        str | None, typer.Option(help="run this when the broker is away")
    ] = None,
    audit: Annotated[Path | None, typer.Option(help="audit log (JSON lines)")] = None,
    rt_priority: Annotated[int, typer.Option(help="SCHED_FIFO priority (0: off)")] = 0,
    status_topic: Annotated[
        str,
        typer.Option(
            help="retained online/offline status with a last will; {station}: the station, "
            "or the stations joined by commas ('': none)"
        ),
    ] = "rtgate/guard/{station}/status",
) -> None:
    """Guard stations in real time: stops go to the broker, explanations to work orders.

    Several stations run as one batch per 20 ms tick: several files, or one channel per
    station of stdin (``arecord -c 4 ... | rtgate guard run - --channels 4 --station A ...``)
    or of a sound card (``--device NAME --channels 4 --station A ...``).
    """
    from rtgate.apps.guard.explain_child import ExplainConfig, ExplainProcess
    from rtgate.apps.guard.explain_worker import load_machines
    from rtgate.apps.guard.mqtt import AuditLog, Broker, StopPublisher, command_failsafe
    from rtgate.apps.guard.store import default_db_path

    reader = None
    try:
        if (device is None) == (not sources):
            raise InvalidRequest("give WAV files, - (stdin), or --device (one of them)")
        names, files = _stations(sources or [], station, channels)
        picked = list(range(len(names))) if len(names) > 1 else [0]  # one station: channel 0
        if device is not None:
            from rtgate.apps.guard.soundcard import DeviceReader

            dev: str | int = int(device) if device.isdigit() else device
            reader = DeviceReader(
                dev, rate, channels, picked, seconds=seconds, buffer_s=device_buffer_s
            )
        r = Rules.load(rules) if rules else Rules()
        if topic is not None:
            mine = {n: replace(r.for_station(n), topic=topic) for n in names}
            r = Rules(r.default, {**r.stations, **mine})
        pub = StopPublisher(
            Broker.parse(broker),
            f"rtgate-guard-{names[0]}-{uuid.uuid4().hex[:6]}",
            failsafe=command_failsafe(failsafe_cmd) if failsafe_cmd else None,
            audit=AuditLog(audit),
            status_topic=status_topic.replace("{station}", ",".join(names)) or None,
            stations=names,
        )
        machines = load_machines(rules) if rules else {}
        cfg = ExplainConfig(str(db or default_db_path()), llm=llm, machines=machines)
        worker = ExplainProcess(cfg).start(wait=False)  # the stop path does not wait for it
        det = Detector(model, n_streams=len(names))
        guard = Guard(names, r, pub, detector=det, on_stop=worker.offer)
    except RtgateError as e:
        _fail(e)
    with realtime(rt_priority):  # the stop path and the MQTT thread; the explainer is not
        if not pub.start(wait_s=2.0):
            console.print(f"[yellow]broker {broker} unreachable: stops use the fail-safe[/yellow]")
        try:
            if reader is not None:
                src = _framed(reader)
            elif files is not None:
                src = _windows_of_files(files)
            else:
                pcm = PcmReader(sys.stdin.buffer, rate=rate, channels=channels, channel=picked)
                src = _framed((chunk, time.time()) for chunk in pcm)
            guard.warm_up(4)  # again: connecting may have left it idle for seconds
            for w, end_ts, rows in src:
                for ev in guard.process(w, end_ts, rows):
                    print(json.dumps({"topic": ev.topic, **_msg(ev.message)}, ensure_ascii=False))
                    sys.stdout.flush()
        except RtgateError as e:
            _fail(e)
        except KeyboardInterrupt:
            pass
        finally:
            pub.wait_delivered(5.0)
            pub.close()
            worker.stop()  # also when the input failed: the child does not outlive us
            if reader is not None and (reader.dropped or reader.overflows):
                console.print(
                    f"[yellow]sound card: {reader.dropped} blocks dropped (stop path behind), "
                    f"{reader.overflows} overflows[/yellow]"
                )


def _msg(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(m.to_json())
    return out


@app.command()
def orders(
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    db: DbOpt = None,
    station: Annotated[str | None, typer.Option(help="only this station")] = None,
    limit: Annotated[int, typer.Option(help="newest N")] = 100,
) -> None:
    """List work orders."""
    from rtgate.apps.guard.store import WorkOrderStore

    rows = [o.public() for o in WorkOrderStore(db).list(station, limit)]
    if json_out:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    table = Table("id", "station", "score", "stop", "after (ms)", "explanation")
    for o in rows:
        stop = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(o["stop_ts"]))
        after = f"{1000 * (o['created_ts'] - o['stop_ts']):.0f}"
        table.add_row(
            str(o["id"]), o["station"], f"{o['score']:.2f}", stop, after, o["explanation"]
        )
    Console().print(table)


@app.command()
def train(
    out: Annotated[Path | None, typer.Option(help="model file (default: the shipped one)")] = None,
    seed: Annotated[int | None, typer.Option(help="seed (default: the shipped model's)")] = None,
    clips: Annotated[int | None, typer.Option(help="simulated training clips")] = None,
    epochs: Annotated[int | None, typer.Option(help="passes over the data")] = None,
    data: Annotated[Path | None, typer.Option(help="also train on a DCASE/MIMII folder")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Train the detector (reproducible), export ONNX, evaluate on unseen motors.

    With no options this rebuilds the shipped model bit for bit (same seed and settings).
    """
    from rtgate.apps.guard.train import TrainConfig
    from rtgate.apps.guard.train import train as do_train

    cfg = TrainConfig()
    cfg = replace(
        cfg,
        seed=cfg.seed if seed is None else seed,
        n_clips=cfg.n_clips if clips is None else clips,
        epochs=cfg.epochs if epochs is None else epochs,
        data_dir=str(data) if data is not None else None,
    )
    try:
        report = do_train(cfg, out, log=lambda s: console.print(s))
    except RtgateError as e:
        _fail(e)
    text = json.dumps(report, ensure_ascii=False, indent=1)
    if json_out is not None:
        json_out.write_text(text + "\n", encoding="utf-8")
    print(text)


@app.command()
def simulate(
    out: Annotated[Path, typer.Option(help="folder for the WAVs (MIMII layout)")],
    n: Annotated[int, typer.Option(help="number of clips")] = 8,
    seconds: float = 6.0,
    seed: int = 7,
    population: Annotated[str, typer.Option(help="train or unseen motors")] = "unseen",
) -> None:
    """Write demo WAVs: motor/id_00/normal/*.wav and abnormal/*.wav plus a manifest."""
    from rtgate.apps.guard.simulate import make_set

    try:
        clips = make_set(n, population, seed=seed, seconds=seconds)  # type: ignore[arg-type]
    except RtgateError as e:
        _fail(e)
    manifest = []
    for i, c in enumerate(clips):
        label = "abnormal" if c.fault else "normal"
        path = out / "motor" / "id_00" / label / f"{i:08d}.wav"
        write_wav(path, c.audio)
        manifest.append(
            {
                "file": str(path),
                "fault": c.fault,
                "onset_s": c.onset_s,
                "severity_db": round(c.severity_db, 1),
                "shaft_hz": round(c.motor.shaft_hz, 2),
                "bearing": c.motor.bearing.name,
            }
        )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    console.print(f"wrote {len(clips)} clips to {out}")
