"""``rtgate guard enroll`` and how ``scan`` and ``run`` find each station's enrolment.

``enroll`` reads WAV files, stdin PCM or a sound card (as ``run`` does), measures the
station's normal (``enrol.py``) and writes it to the enrolment directory. Bad input (too
little audio, a bad station name, a file it cannot read, a recording the general detector
stops on) is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import numpy as np
import typer
from rich.console import Console

from rtgate.apps.guard.audio import PcmReader
from rtgate.apps.guard.baseline import Enrolment, EnrolmentStore, detector_identity
from rtgate.apps.guard.detector import Detector, default_model_path
from rtgate.apps.guard.enrol import Fitted, HashingReader, Source, file_source, fit, listen
from rtgate.apps.guard.features import RATE
from rtgate.apps.guard.orders import BearingOrders
from rtgate.apps.guard.rules import Rules
from rtgate.core.errors import InvalidRequest, RtgateError

__all__ = ["EnrolmentsOpt", "enroll", "load_enrolments"]

console = Console(stderr=True)

EnrolmentsOpt = Annotated[
    Path | None,
    typer.Option(
        "--enrolments",
        help="directory of enrolments (default: $RTGATE_GUARD_ENROLMENTS, else "
        "~/.local/share/rtgate/enrolments)",
    ),
]


def _fail(e: RtgateError) -> NoReturn:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


def load_enrolments(
    stations: list[str], root: Path | None, model: Path | None
) -> list[Enrolment | None]:
    """Each station's enrolment from ``root`` (None: it has none, or one made with another
    detector than ``model``, which is not used). Says on stderr which stations run without
    one. :class:`ConfigError` when a station's file is there but is not an enrolment."""
    store = EnrolmentStore(root)
    mine = detector_identity(model or default_model_path(), {})["sha256"]
    out: list[Enrolment | None] = []
    missing: list[str] = []
    for s in stations:
        e = store.load(s)
        if e is not None and e.detector_sha256 != mine:
            console.print(
                f"[yellow]station {s}: its enrolment was made with another detector "
                f"({str(e.detector_sha256)[:12]}, this one {mine[:12]}): not used; enrol it "
                "again[/yellow]"
            )
            e = None
        elif e is None:
            missing.append(s)
        out.append(e)
    if missing:
        names = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        console.print(
            f"[yellow]no enrolment for {names} in {store.root}: the general detector alone "
            "decides (rtgate guard enroll --station NAME)[/yellow]"
        )
    return out


def _sources(
    files: list[str], device: str | None, rate: int, channels: int, channel: int, minutes: float
) -> tuple[list[tuple[Source, Iterable[np.ndarray]]], HashingReader | None]:
    """What to listen to: each WAV file, stdin, or the sound card."""
    if (device is None) == (not files):
        raise InvalidRequest("give WAV files, - (stdin), or --device (one of them)")
    if files == ["-"]:
        reader = HashingReader(sys.stdin.buffer)
        pcm = PcmReader(reader, rate=rate, channels=channels, channel=channel)  # type: ignore[arg-type]
        return [(Source("stdin", "stdin", rate, channel), iter(pcm))], reader
    if "-" in files:
        raise InvalidRequest("stdin (-) cannot be mixed with files")
    if device is not None:
        from rtgate.apps.guard.soundcard import DeviceReader

        dev: str | int = int(device) if device.isdigit() else device
        card = DeviceReader(dev, rate, channels, channel, seconds=minutes * 60)
        chunks: Iterator[np.ndarray] = (c for c, _ in card)
        return [(Source(f"device {device}", "device", rate, channel), chunks)], None
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise InvalidRequest(f"no such file: {', '.join(missing)}")
    return [file_source(Path(f), channel) for f in files], None


def enroll(
    sources: Annotated[
        list[str] | None,
        typer.Argument(help="WAV files of the station running healthy, or - (stdin s16le)"),
    ] = None,
    station: Annotated[str, typer.Option(help="the station to enrol")] = "",
    minutes: Annotated[
        float, typer.Option(help="listen this long (files: use at most this much of them)")
    ] = 5.0,
    device: Annotated[str | None, typer.Option(help="sound card (name or index)")] = None,
    rate: Annotated[int, typer.Option(help="stdin or sound card sample rate")] = RATE,
    channels: Annotated[int, typer.Option(help="stdin or sound card channels")] = 1,
    channel: Annotated[int, typer.Option(help="the station's channel")] = 0,
    enrolments: Annotated[
        Path | None,
        typer.Option("--enrolments", "--out", help="directory to write to (see scan/run)"),
    ] = None,
    rules: Annotated[Path | None, typer.Option("--rules", help="rules TOML file")] = None,
    model: Annotated[Path | None, typer.Option("--model", help="detector ONNX file")] = None,
    accept_stops: Annotated[
        bool,
        typer.Option(
            "--accept-stops",
            help="enrol even though the general detector stops on the recording (only for a "
            "machine checked healthy by other means: what the detector hears on it then "
            "becomes the station's normal, and only a rise over it stops)",
        ),
    ] = False,
    station_model: Annotated[
        bool,
        typer.Option(
            "--station-model",
            help="also fit the station's own fault model on the recording (format /4; "
            "faults and benign sounds added to it, a few seconds; off by default)",
        ),
    ] = False,
    slow_range: Annotated[
        bool,
        typer.Option(
            "--slow-range",
            help="also measure the station's slow range (format /5), for the rules' slow "
            "clause (slow = 6 in a rules file; off by default); the median's range, stored "
            "by default, stores it too",
        ),
    ] = False,
    no_median_range: Annotated[
        bool,
        typer.Option(
            "--no-median-range",
            help="do not measure the median's range of the high bands (format /6, what the "
            "rules' persist clause, on by default, needs): the file is then /3, /4 or /5",
        ),
    ] = False,
    orders: Annotated[
        str | None,
        typer.Option(
            "--orders",
            help="the station's bearing defect orders per shaft revolution, from its maker's "
            "catalogue: BPFO,BPFI,2xBSF (e.g. 3.58,5.42,4.70; format /10); needs --shaft-hz",
        ),
    ] = None,
    shaft_hz: Annotated[
        str | None,
        typer.Option(
            "--shaft-hz",
            help="the shaft's speed range in Hz, LOW-HIGH (e.g. 24-34 for 1440-2040 rpm); the "
            "speed is read from the sound within it",
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the summary here")] = None,
) -> None:
    """Listen to a station running healthy and store its own normal for scan and run.

    The station's file holds the mean and spread of the detector's input features, how far
    they strayed, and the recording's provenance. Refused (exit 2): under 30 s of audio, a
    silent recording, or one the general detector stops on (unless --accept-stops).
    """
    try:
        if not station:
            raise InvalidRequest("give the station to enrol: --station NAME")
        if not 0.5 <= minutes <= 120:
            raise InvalidRequest(f"--minutes must be in [0.5, 120], got {minutes:g}")
        store = EnrolmentStore(enrolments)
        store.path(station)
        r = Rules.load(rules) if rules else Rules()
        r.for_station(station).topic_for(station)  # a name its stops could not be sent for
        if (orders is None) != (shaft_hz is None):
            raise InvalidRequest("--orders and --shaft-hz go together")
        bearing = None
        if orders is not None and shaft_hz is not None:
            bearing = BearingOrders.parse(orders, shaft_hz)
        if bearing is not None and no_median_range:
            raise InvalidRequest("--orders needs the envelope lines, which --no-median-range drops")
        srcs, reader = _sources(sources or [], device, rate, channels, channel, minutes)
        det = Detector(model, n_streams=1)
        rec = listen(srcs, det, minutes * 60, keep_audio=station_model or bearing is not None)
        if reader is not None:
            rec.sources[0].sha256 = reader.digest.hexdigest()
        extra = {"minutes_asked": minutes, "rules": str(rules) if rules else None}
        rule = r.for_station(station)
        fitted = fit(
            station,
            rec,
            rule=rule,
            detector=det,
            accept_stops=accept_stops,
            extra=extra,
            station_model=station_model,
            slow=slow_range,
            persist=not no_median_range,
            bearing=bearing,
        )
        path = store.save(fitted.enrolment)
    except RtgateError as e:
        _fail(e)
    _report(fitted, path, json_out)


def _report(fitted: Fitted, path: Path, json_out: Path | None) -> None:
    """Warnings and one line on stderr, the summary as JSON on stdout (or in a file)."""
    for w in fitted.warnings:
        console.print(f"[yellow]warning: {w}[/yellow]")
    done = fitted.enrolment
    g = done.general
    console.print(
        f"enrolled {done.station}: {done.provenance.get('seconds')} s from "
        f"{len(done.provenance.get('sources', ()))} source(s); the general detector's highest "
        f"score {g['max_score']}, {g['stops']} stop(s); {path}"
    )
    summary: dict[str, Any] = {"station": done.station, "file": str(path), **done.summary()}
    summary["general_detector"] = dict(g)
    text = json.dumps(summary, ensure_ascii=False, indent=1)
    if json_out is not None:
        json_out.write_text(text + "\n", encoding="utf-8")
    print(text)
