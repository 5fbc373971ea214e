"""``rtgate guard …``: scan files, guard a live stream, enrol a station, list work orders,
train, evaluate, simulate."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from rtgate.apps.guard.audio import PcmReader, WavStream, paced, read_wav, write_wav
from rtgate.apps.guard.baseline import Enrolment
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.enrol_cmd import EnrolmentsOpt, enroll, load_enrolments
from rtgate.apps.guard.features import HOP, RATE, Framer
from rtgate.apps.guard.pipeline import Guard, StopEvent
from rtgate.apps.guard.rt import realtime
from rtgate.apps.guard.rules import Rules
from rtgate.apps.guard.tickshare import LIVE_BUDGET_S
from rtgate.core.errors import InvalidRequest, RtgateError

if TYPE_CHECKING:  # the run's pieces are imported inside the command (rtgate --help is fast)
    from rtgate.apps.guard.explain_child import ExplainConfig
    from rtgate.apps.guard.mqtt import StopPublisher
    from rtgate.apps.guard.soundcard import DeviceReader

__all__ = ["app", "scan_files"]

app = typer.Typer(help="Acoustic guard: a small detector stops the line; a model explains.")
console = Console(stderr=True)

RulesOpt = Annotated[Path | None, typer.Option("--rules", help="rules TOML file")]
ModelOpt = Annotated[Path | None, typer.Option("--model", help="detector ONNX file")]
DbOpt = Annotated[Path | None, typer.Option("--db", help="work-order SQLite file")]


def _fail(e: RtgateError) -> NoReturn:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


app.command()(enroll)


def scan_files(
    files: list[Path],
    rules: Rules | None = None,
    model: Path | None = None,
    stations: list[str] | None = None,
    enrolments: dict[str, Enrolment | None] | None = None,
) -> list[dict[str, Any]]:
    """Scan WAV files as fast as possible; per file its highest score and its stops. Each
    file is streamed (bounded memory for any length); one with no audio is an
    ``InvalidRequest``, one cut short is scanned as far as it goes, with a warning.

    ``stations``: the station of each file (default: ``scan``); ``enrolments``: a station's
    enrolment, used when there is one (the stops then come from the fused score).
    """
    det = Detector(model, n_streams=1)
    names = stations or ["scan"] * len(files)
    out = []
    for f, name in zip(files, names, strict=True):
        wav = WavStream(f)
        det.reset()
        enrolment = (enrolments or {}).get(name)
        guard = Guard([name], rules, detector=det, enrolments=[enrolment])
        framer, stops, top, top_det, i = Framer(), [], 0.0, 0.0, 0
        for block in wav.blocks():
            for w, _ in framer.push(block, 0.0):
                i += 1
                end = i * HOP / RATE
                for ev in guard.process(w[None], end):
                    stops.append({"t_ms": round(end * 1000), "score": ev.message.score})
                top = max(top, float(guard.last_scores[0]))
                top_det = max(top_det, float(guard.last_detector_scores[0]))
        res: dict[str, Any] = {"file": str(f), "max_score": round(top, 4), "stops": stops}
        res["station"] = name
        res["enrolment"] = enrolment.summary() if enrolment is not None else None
        res["max_detector_score"] = round(top_det, 4)
        if wav.truncated:
            res["warning"] = f"truncated: the header promises more than the {i} windows read"
            typer.echo(f"warning: {f}: {res['warning']}", err=True)
        out.append(res)
    return out


def _scan_stations(files: list[Path], names: list[str] | None) -> list[str]:
    """One station per file (default: the file's name without its suffix), or one for all."""
    if not names:
        return [f.stem for f in files]
    if len(names) == 1:
        return names * len(files)
    if len(names) != len(files):
        raise InvalidRequest(
            f"{len(names)} station names for {len(files)} files: give one or one each"
        )
    return names


@app.command()
def scan(
    files: Annotated[list[Path], typer.Argument(help="WAV files (any rate, first channel)")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write results here")] = None,
    rules: RulesOpt = None,
    model: ModelOpt = None,
    station: Annotated[
        list[str] | None,
        typer.Option(
            help="the station of the files (one for all, or one per file; default: "
            "each file's name without .wav): its enrolment is used"
        ),
    ] = None,
    enrolments: EnrolmentsOpt = None,
) -> None:
    """Scan WAV files as fast as possible and report the stops each would cause.

    A station with an enrolment (``guard enroll``) is decided with it; the others with the
    general detector alone, which is said on stderr and as ``"enrolment": null``.
    """
    try:
        names = _scan_stations(files, station)
        unique = list(dict.fromkeys(names))
        found = load_enrolments(unique, enrolments, model)
        res = scan_files(
            files,
            Rules.load(rules) if rules else None,
            model,
            names,
            dict(zip(unique, found, strict=True)),
        )
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


# guard run's options
_Sources = Annotated[
    list[str] | None,
    typer.Argument(
        help="WAV files, one station each (replayed in real time), or - (stdin); none with --device"
    ),
]
_Broker = Annotated[str, typer.Option(help="mqtt://HOST:PORT")]
_Topic = Annotated[
    str | None, typer.Option(help="stop topic, {station} allowed (default: from the rules)")
]
_Station = Annotated[
    list[str] | None,
    typer.Option(help="station name; repeat: one per file or per stdin channel"),
]
_Rate = Annotated[int, typer.Option(help="stdin or sound card sample rate")]
_Channels = Annotated[int, typer.Option(help="stdin or sound card channels")]
_Device = Annotated[
    str | None,
    typer.Option(help="sound card (PortAudio name or index; the soundcard extra)"),
]
_Seconds = Annotated[float | None, typer.Option(help="sound card: stop after this much audio")]
_DeviceBufferS = Annotated[
    float, typer.Option(help="sound card: audio that may wait before blocks are dropped")
]
_Llm = Annotated[bool, typer.Option(help="let the local language model explain")]
_FailsafeCmd = Annotated[
    str | None,
    typer.Option(help="run this when a stop may not reach the broker (RTGATE_STOP in env)"),
]
_AllowNoFailsafe = Annotated[
    bool,
    typer.Option(help="run even when the broker is unreachable at start and no --failsafe-cmd"),
]
_ConnectTimeout = Annotated[
    float, typer.Option(help="seconds for the first connection to the broker")
]
_Audit = Annotated[Path | None, typer.Option(help="audit log (JSON lines)")]
_RtPriority = Annotated[int, typer.Option(help="SCHED_FIFO priority (0: off)")]
_StatusTopic = Annotated[
    str,
    typer.Option(
        help="retained online/offline status with a last will; {station}: the station, "
        "or the stations joined by commas ('': none)"
    ),
]


@app.command(
    epilog="Exit codes: 0 done (end of input, SIGTERM or SIGINT); 2 bad arguments, a topic "
    "that cannot be published to, or no broker and no fail-safe; 3 a stop reached neither "
    "the broker (no PUBACK) nor a fail-safe."
)
def run(
    sources: _Sources = None,
    broker: _Broker = "mqtt://127.0.0.1:1883",
    topic: _Topic = None,
    station: _Station = None,
    rate: _Rate = RATE,
    channels: _Channels = 1,
    device: _Device = None,
    seconds: _Seconds = None,
    device_buffer_s: _DeviceBufferS = 2.0,
    rules: RulesOpt = None,
    model: ModelOpt = None,
    db: DbOpt = None,
    llm: _Llm = True,
    failsafe_cmd: _FailsafeCmd = None,
    allow_no_failsafe: _AllowNoFailsafe = False,
    connect_timeout: _ConnectTimeout = 2.0,
    audit: _Audit = None,
    rt_priority: _RtPriority = 0,
    status_topic: _StatusTopic = "rtgate/guard/{station}/status",
    enrolments: EnrolmentsOpt = None,
) -> None:
    """Guard stations in real time: stops go to the broker, explanations to work orders.

    Several stations run as one batch per 20 ms tick: several files, or one channel per
    station of stdin (``arecord -c 4 ... | rtgate guard run - --channels 4 --station A ...``)
    or of a sound card (``--device NAME --channels 4 --station A ...``). A station with an
    enrolment (``guard enroll``) is decided with it; one without is named on stderr.

    Every stop and status topic is checked before any audio is read. With the broker
    unreachable at start (no connection within --connect-timeout) and no --failsafe-cmd the
    run is refused unless --allow-no-failsafe. SIGTERM and SIGINT end it cleanly (status
    offline, explainer stopped).
    """
    from rtgate.apps.guard.runner import Ended, Shutdown, connect, guard_until_done

    with Shutdown() as shutdown:
        try:
            plan = _plan(sources or [], station, channels, device, topic, rules, status_topic)
            reader = _open_device(plan, device, rate, channels, seconds, device_buffer_s)
            pub = _publisher(plan, broker, failsafe_cmd, audit)
            det = Detector(model, n_streams=len(plan.names))
            found = load_enrolments(plan.names, enrolments, det.path)
            guard = Guard(
                plan.names,
                plan.rules,
                pub,
                detector=det,
                enrolments=found,
                tick_budget_s=LIVE_BUDGET_S,  # the lines put off what a tick cannot afford
            )
        except RtgateError as e:
            _fail(e)
        except Ended:  # before anything was started
            raise typer.Exit(0) from None

        def start() -> None:
            if not connect(pub, connect_timeout, failsafe_cmd is not None, allow_no_failsafe):
                console.print(f"[yellow]broker {broker} unreachable: stops use the fail-safe")

        with realtime(rt_priority):  # the stop path and the MQTT thread; the explainer is not
            windows = _source(plan, reader, rate, channels)
            cfg = _explain_config(rules, db, llm)
            printer = _stop_printer(found)
            error = guard_until_done(guard, pub, start, windows, cfg, shutdown, printer)
    _report_drops(reader)
    _finish(pub, error)


def _publisher(
    plan: _Plan, broker: str, failsafe_cmd: str | None, audit: Path | None
) -> StopPublisher:
    from rtgate.apps.guard.mqtt import AuditLog, Broker, StopPublisher, command_failsafe

    return StopPublisher(
        Broker.parse(broker),
        f"rtgate-guard-{plan.names[0]}-{uuid.uuid4().hex[:6]}",
        failsafe=command_failsafe(failsafe_cmd) if failsafe_cmd else None,
        audit=AuditLog(audit),
        status_topic=plan.status,
        stations=plan.names,
    )


def _report_drops(reader: DeviceReader | None) -> None:
    if reader is not None and (reader.dropped or reader.overflows):
        console.print(
            f"[yellow]sound card: {reader.dropped} blocks dropped (stop path behind), "
            f"{reader.overflows} overflows[/yellow]"
        )


@dataclass(frozen=True)
class _Plan:
    """What ``guard run`` will guard, checked before anything is opened or started."""

    names: list[str]
    files: list[Path] | None
    picked: list[int]  # the channels read, one per station
    rules: Rules
    status: str | None


def _plan(
    sources: list[str],
    names: list[str] | None,
    channels: int,
    device: str | None,
    topic: str | None,
    rules_path: Path | None,
    status_template: str,
) -> _Plan:
    """Stations, rules and topics; every topic checked (:class:`InvalidRequest`)."""
    from rtgate.apps.guard.runner import status_topic, stop_topics

    if (device is None) == (not sources):
        raise InvalidRequest("give WAV files, - (stdin), or --device (one of them)")
    stations, files = _stations(sources, names, channels)
    picked = list(range(len(stations))) if len(stations) > 1 else [0]  # one station: ch. 0
    r = Rules.load(rules_path) if rules_path else Rules()
    if topic is not None:
        mine = {n: replace(r.for_station(n), topic=topic) for n in stations}
        r = Rules(r.default, {**r.stations, **mine})
    stop_topics(r, stations)
    return _Plan(stations, files, picked, r, status_topic(status_template, stations))


def _open_device(
    plan: _Plan, device: str | None, rate: int, channels: int, seconds: float | None, buf: float
) -> DeviceReader | None:
    """The sound card, checked now (a wrong name is an error before anything starts)."""
    if device is None:
        return None
    from rtgate.apps.guard.soundcard import DeviceReader

    dev: str | int = int(device) if device.isdigit() else device
    return DeviceReader(dev, rate, channels, plan.picked, seconds=seconds, buffer_s=buf)


def _source(plan: _Plan, reader: DeviceReader | None, rate: int, channels: int) -> Windows:
    """The windows to guard (nothing is read until the first is asked for)."""
    if reader is not None:
        return _framed(reader)
    if plan.files is not None:
        return _windows_of_files(plan.files)
    pcm = PcmReader(sys.stdin.buffer, rate=rate, channels=channels, channel=plan.picked)
    return _framed((chunk, time.time()) for chunk in pcm)


def _explain_config(rules: Path | None, db: Path | None, llm: bool) -> ExplainConfig:
    from rtgate.apps.guard.explain_child import ExplainConfig
    from rtgate.apps.guard.explain_worker import load_machines
    from rtgate.apps.guard.store import default_db_path

    machines = load_machines(rules) if rules else {}
    return ExplainConfig(str(db or default_db_path()), llm=llm, machines=machines)


def _stop_printer(enrolments: list[Enrolment | None]) -> Callable[[StopEvent], None]:
    """Print each stop as a JSON line, with the id of the enrolment it was decided with
    (null: the general detector alone)."""
    ids = [e.id if e is not None else None for e in enrolments]

    def show(ev: StopEvent) -> None:
        line = {"topic": ev.topic, **_msg(ev.message), "enrolment": ids[ev.index]}
        print(json.dumps(line, ensure_ascii=False), flush=True)

    return show


def _finish(pub: StopPublisher, error: RtgateError | None) -> None:
    """The run's exit: 3 when a stop reached neither the broker nor a fail-safe, 2 on an
    error, else 0."""
    from rtgate.apps.guard.runner import EXIT_UNDELIVERED

    if error is not None:
        typer.echo(f"error: {error}", err=True)
    if pub.lost:
        typer.echo(
            f"error: {pub.lost} stop(s) not delivered: no PUBACK from the broker and no "
            "fail-safe ran (see the audit log)",
            err=True,
        )
        raise typer.Exit(EXIT_UNDELIVERED)
    if error is not None:
        raise typer.Exit(2)


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
    wide: Annotated[
        int | None,
        typer.Option(help="also this many clips of the randomised physics (held-out families)"),
    ] = None,
    generic: Annotated[
        int | None,
        typer.Option(help="also this many training motors with generic nuisances mixed in"),
    ] = None,
    relative: Annotated[
        bool,
        typer.Option(help="features relative to each station's running baseline as well"),
    ] = False,
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
        wide_clips=cfg.wide_clips if wide is None else wide,
        generic_clips=cfg.generic_clips if generic is None else generic,
        relative=relative,
    )
    try:
        report = do_train(cfg, out, log=lambda s: console.print(s))
    except RtgateError as e:
        _fail(e)
    _emit(report, json_out)


@app.command()
def evaluate(
    set_: Annotated[
        str, typer.Option("--set", help="unseen (the simulator's held-out motors) or outside")
    ] = "unseen",
    baseline: Annotated[
        str | None, typer.Option(help="also run a baseline on the same clips: dcase2020")
    ] = None,
    model: ModelOpt = None,
    stations: Annotated[int, typer.Option(help="outside: stations (clips)")] = 100,
    clips: Annotated[int, typer.Option(help="unseen: clips")] = 480,
    seed: Annotated[int | None, typer.Option(help="seed (default: the set's own)")] = None,
    station_model: Annotated[
        bool,
        typer.Option(
            "--station-model", help="outside: also each station's own model (enroll's option)"
        ),
    ] = False,
    enrol_day: Annotated[
        int,
        typer.Option(
            "--enrol-day",
            help="outside: enrol each station on its machine's recording of another day "
            "(1, 2, ...: new noise, events, speed set point and levels; 0: the first part of "
            "the scored recording)",
        ),
    ] = 0,
    known_orders: Annotated[
        bool,
        typer.Option(
            "--known-orders",
            help="outside: enrol each station with its bearing's defect orders and 0.9-1.4 x "
            "its nominal shaft speed (enroll's --orders and --shaft-hz)",
        ),
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
) -> None:
    """Evaluate the detector on a set it was never trained or tuned on.

    ``--set outside``: machines from a simulator of their own whose every parameter lies
    outside the training ranges (fixed seed), with and without enrolment, per family;
    ``--baseline dcase2020`` trains the DCASE 2020 autoencoder on the same healthy training
    data and reports its clip AUC on the same clips (needs the train extra).
    """
    try:
        if set_ == "outside":
            from rtgate.apps.guard.evaluate_outside import evaluate_outside
            from rtgate.apps.guard.outside import SEED

            report = evaluate_outside(
                model,
                stations,
                SEED if seed is None else seed,
                baseline=baseline,
                log=lambda s: console.print(s),
                station_model=station_model,
                enrol_day=enrol_day,
                known_orders=known_orders,
            )
        elif set_ == "unseen":
            if baseline is not None or enrol_day or known_orders:
                raise InvalidRequest(
                    "--baseline, --enrol-day and --known-orders run with --set outside"
                )
            from rtgate.apps.guard.evaluate import evaluate as run_unseen

            report = run_unseen(model, clips, 2000 if seed is None else seed, seconds=8.0)
        else:
            raise InvalidRequest(f"--set must be unseen or outside, got {set_!r}")
    except RtgateError as e:
        _fail(e)
    _emit(report, json_out)


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


def _emit(report: Any, json_out: Path | None) -> None:
    """Print ``report`` as JSON, and write it to ``json_out`` too when given."""
    text = json.dumps(report, ensure_ascii=False, indent=1)
    if json_out is not None:
        json_out.write_text(text + "\n", encoding="utf-8")
    print(text)
