"""``rtgate guard train``: simulate motors, train the detector, export ONNX, evaluate.

Reproducible: the simulator is seeded, torch runs deterministic algorithms on a fixed number
of threads, and batches are drawn from a seeded generator; the same config gives the same
weights. Needs the ``train`` extra (torch, onnx). Optionally mixes in real recordings laid
out as DCASE/MIMII folders (``data_dir``), labelled by file.

A station runs for hours, so the GRU must not drift: clips (8 s) are cut into chunks
(``chunk_s``) and the state is carried from one chunk to the next, detached (truncated
backpropagation through time). The loss weighs the windows that decide the two kinds of
error: the first ``onset_windows`` after an onset (the delay), the healthy windows of a knock
and its ring-down, and air hiss and the ``recover_s`` after it (false stops; a hiss must not
leave the state latched).
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.detector import default_model_path
from rtgate.apps.guard.evaluate import evaluate, evaluate_clips
from rtgate.apps.guard.features import N_FEATURES, N_MELS, WindowFeatures
from rtgate.apps.guard.simulate import HELD_OUT, make_set

__all__ = ["TrainConfig", "export_onnx", "held_out", "train"]

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trained weights."""

    seed: int = 0
    n_clips: int = 2000
    seconds: float = 8.0
    epochs: int = 24
    batch: int = 16
    lr: float = 3e-3
    k: int = 3
    hidden: int = 32
    c1: int = 12
    c2: int = 16
    threads: int = 1
    eval_clips: int = 240
    severity_db: tuple[float, float] = (4.0, 16.0)
    onset_windows: int = 3
    onset_weight: float = 12.0
    impact_weight: float = 6.0
    impact_windows: int = 6
    hiss_weight: float = 4.0
    recover_s: float = 1.0
    chunk_s: float = 4.0
    data_dir: str | None = None
    wide_clips: int = 0  # clips of the randomised physics (simulate.py's "wide" families)
    held_out_clips: int = 120  # validation clips of the held-out families (with wide_clips)
    generic_clips: int = 0  # training motors with generic nuisances mixed in (generic.py)
    nuisance_weight: float = 3.0  # loss weight of their healthy windows
    relative: bool = False  # features relative to the stream's running baseline as well
    alpha: float = 1 / 250  # the running baseline's rate (with relative)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class _Data:
    x: list[F32] = field(default_factory=list)  # (T, F) features per sequence
    y: list[npt.NDArray[np.float32]] = field(default_factory=list)  # (T,) fault label
    w: list[npt.NDArray[np.float32]] = field(default_factory=list)  # (T,) loss weight


def _simulated(cfg: TrainConfig) -> _Data:
    wf = WindowFeatures()
    data = _Data()
    clips = make_set(
        cfg.n_clips, "train", seed=cfg.seed, seconds=cfg.seconds, severity_db=cfg.severity_db
    )
    if cfg.wide_clips:  # the families not held out
        clips += make_set(
            cfg.wide_clips, "wide", seed=cfg.seed, seconds=cfg.seconds, severity_db=cfg.severity_db
        )
    nuisance = [False] * len(clips)
    if cfg.generic_clips:  # hard negatives: generic periodic, tonal and impulsive sounds
        from rtgate.apps.guard.generic import add_nuisances

        rng = np.random.default_rng([cfg.seed, 18])
        more = make_set(
            cfg.generic_clips,
            "train",
            seed=cfg.seed + 100,
            seconds=cfg.seconds,
            severity_db=cfg.severity_db,
        )
        clips += [add_nuisances(c, rng)[0] for c in more]
        nuisance += [True] * len(more)
    for clip, noisy in zip(clips, nuisance, strict=True):
        data.x.append(wf.frames(clip.audio))
        y = clip.labels().astype(np.float32)
        data.y.append(y)
        w = np.where(noisy & (y < 0.5), cfg.nuisance_weight, 1.0).astype(np.float32)
        if clip.onset_s is not None:  # the first windows after the onset decide the delay
            first = int(np.argmax(y > 0))
            w[first : first + cfg.onset_windows] = cfg.onset_weight
        for t in clip.impacts_s:  # benign knocks on a healthy machine: the false stops
            i = int(t * 16_000) // 320
            ring = slice(i, i + cfg.impact_windows)  # the knock and its ring-down
            w[ring] = np.where(y[ring] < 0.5, cfg.impact_weight, w[ring])
        if clip.hiss_s is not None:  # air hiss adds high-band energy, and must not latch
            a, b = (int(t * 16_000) // 320 for t in clip.hiss_s)
            span = slice(a, b + int(cfg.recover_s * 50))
            w[span] = np.where(y[span] < 0.5, cfg.hiss_weight, w[span])
        data.w.append(w)
    return data


def _folder(cfg: TrainConfig, data: _Data) -> None:
    from rtgate.apps.guard.audio import read_dataset, read_wav

    assert cfg.data_dir is not None
    wf = WindowFeatures()
    hop = int(cfg.seconds * 16_000)
    for item in read_dataset(cfg.data_dir):
        audio = read_wav(item.path)
        for start in range(0, max(1, len(audio) - hop + 1), hop):  # cut to training length
            x = wf.frames(audio[start : start + hop])
            if len(x) >= 8:
                data.x.append(x)
                data.y.append(np.full(len(x), float(item.anomalous), np.float32))
                data.w.append(np.ones(len(x), np.float32))


# The network's raw scores at the operating points chosen on the tuning set (seed 3000, 480
# clips of 8 s, used for nothing else): 0.98 is the lowest threshold there with no false stop
# and no miss, and one window at 0.998 is clear enough to stop at once. The exported score is
# calibrated so that these land on the rules file's documented defaults, 0.92 and 0.995:
# ``sigmoid(a * logit + b)``, monotonic, so rankings and ROC AUC are unchanged.
OPERATING_POINTS: tuple[tuple[float, float], tuple[float, float]] = ((0.98, 0.92), (0.998, 0.995))


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def calibration(
    points: tuple[tuple[float, float], tuple[float, float]] = OPERATING_POINTS,
) -> tuple[float, float]:
    """``(a, b)`` of the logit map taking each raw score of ``points`` to its target."""
    (r1, t1), (r2, t2) = points
    a = (_logit(t2) - _logit(t1)) / (_logit(r2) - _logit(r1))
    return a, _logit(t1) - a * _logit(r1)


def calibrate(proto: Any, a: float, b: float) -> None:
    """Rewrite an exported detector in place: ``score = sigmoid(a * logit + b)``."""
    from onnx import helper, numpy_helper

    g = proto.graph
    sig = next((n for n in g.node if n.op_type == "Sigmoid" and n.output[0] == "score"), None)
    if sig is None:
        raise ValueError("no Sigmoid produces 'score': not a detector export")
    g.initializer.extend(
        [
            numpy_helper.from_array(np.array(a, np.float32), "calibration_a"),
            numpy_helper.from_array(np.array(b, np.float32), "calibration_b"),
        ]
    )
    raw = sig.input[0]
    scaled = helper.make_node("Mul", [raw, "calibration_a"], ["calibration_scaled"])
    shifted = helper.make_node("Add", ["calibration_scaled", "calibration_b"], ["calibrated"])
    sig.input[0] = "calibrated"
    at = list(g.node).index(sig)
    g.node.insert(at, shifted)
    g.node.insert(at, scaled)


def export_onnx(net: Any, path: Path, info: dict[str, Any]) -> None:
    """Write the streaming step of ``net`` as ONNX with the detector's metadata (its score
    calibrated to :data:`OPERATING_POINTS`)."""
    import onnx
    import torch

    from rtgate.apps.guard.network import StepWrapper

    step = StepWrapper(net).eval()
    args = (torch.zeros(1, net.k, N_FEATURES), torch.zeros(1, net.state_size))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            step,
            args,
            buf,  # type: ignore[arg-type]  # a file object works and is documented
            dynamo=False,
            input_names=["stack", "h"],
            output_names=["score", "h_out"],
            dynamic_axes={n: {0: "batch"} for n in ("stack", "h", "score", "h_out")},
            opset_version=17,
        )
    proto = onnx.load_from_string(buf.getvalue())
    a, b = calibration()
    calibrate(proto, a, b)
    info = {**info, "calibration": {"a": a, "b": b, "raw_to_score": OPERATING_POINTS}}
    meta = {"k": str(net.k), "hidden": str(net.state_size), "n_features": str(N_FEATURES)}
    meta["info"] = json.dumps(info, sort_keys=True)
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(proto.SerializeToString())


def _fit(cfg: TrainConfig, data: _Data, log: Any) -> Any:
    import torch
    from torch import nn

    from rtgate.apps.guard.network import DetectorNet, running_baseline

    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    net = DetectorNet(
        k=cfg.k, hidden=cfg.hidden, c1=cfg.c1, c2=cfg.c2, relative=cfg.relative, alpha=cfg.alpha
    )
    allx = np.concatenate(data.x)
    net.mean.copy_(torch.from_numpy(allx.mean(0)))
    net.std.copy_(torch.from_numpy(allx.std(0) + 1e-3))
    base = [running_baseline(x, cfg.alpha) for x in data.x] if cfg.relative else []
    if base:
        rel = np.concatenate([x - b for x, b in zip(data.x, base, strict=True)])
        net.rel_std.copy_(torch.from_numpy(rel.std(0) + 1e-3))
    t_len = min(len(x) for x in data.x)
    chunk = max(1, int(cfg.chunk_s * 50))
    n_chunks = -(-t_len // chunk)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, cfg.lr, total_steps=cfg.epochs * -(-len(data.x) // cfg.batch) * n_chunks
    )
    bce = nn.BCEWithLogitsLoss(reduction="none")
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(data.x))
        total = 0.0
        for b in range(0, len(order), cfg.batch):
            sel = order[b : b + cfg.batch]
            x = np.stack([data.x[i][:t_len] for i in sel])
            gain = rng.uniform(-2.3, 2.3, (len(sel), 1, 1)).astype(np.float32)
            x[:, :, :N_MELS] += gain
            bt = None
            if base:  # the baseline moves with the gain (a constant offset of the log-mel)
                bx = np.stack([base[i][:t_len] for i in sel])
                bx[:, :, :N_MELS] += gain
                bt = torch.from_numpy(bx)
            y = torch.from_numpy(np.stack([data.y[i][:t_len] for i in sel]))
            w = torch.from_numpy(np.stack([data.w[i][:t_len] for i in sel]))
            xt = torch.from_numpy(x)
            pad = torch.cat([xt[:, :1].expand(-1, cfg.k - 1, -1), xt], dim=1)
            stacks = pad.unfold(1, cfg.k, 1).permute(0, 1, 3, 2)  # (B, T, K, F)
            # truncated backpropagation through time: the state is carried from chunk to
            # chunk, so the recurrence learns to stay put over runs longer than one chunk
            h = torch.zeros(len(sel), net.hidden)
            for c in range(0, t_len, chunk):
                part = slice(c, c + chunk)
                logits, h = net(stacks[:, part], h.detach(), None if bt is None else bt[:, part])
                loss = (bce(logits, y[:, part]) * w[:, part]).sum() / w[:, part].sum()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(sel) / n_chunks
        log(f"epoch {epoch + 1}/{cfg.epochs} loss {total / len(order):.4f}")
    return net.eval()


def held_out(model: str | Path | None, n_clips: int, seed: int, seconds: float) -> dict[str, Any]:
    """The detector on clips of each held-out family of the randomised physics (whole
    families no training clip came from), family by family."""
    out = {}
    for fam in HELD_OUT:
        clips = make_set(n_clips, "wide", seed=seed, seconds=seconds, families=(fam,))
        report = evaluate_clips(model, clips)
        del report["scores"]
        out[fam] = report
    return out


def train(
    cfg: TrainConfig = TrainConfig(),
    out: str | Path | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Train, export to ``out`` (default: the shipped model file), evaluate; return a report."""
    t0 = time.perf_counter()
    path = Path(out) if out is not None else default_model_path()
    data = _simulated(cfg)
    if cfg.data_dir:
        _folder(cfg, data)
    log(f"{len(data.x)} sequences, {sum(len(x) for x in data.x)} windows")
    net = _fit(cfg, data, log)
    info: dict[str, Any] = {"config": asdict(cfg), "digest": cfg.digest()}
    export_onnx(net, path, info)
    report = evaluate(path, n_clips=cfg.eval_clips, seed=cfg.seed + 1000, seconds=cfg.seconds)
    info["eval_unseen"] = report
    if cfg.wide_clips:
        report["held_out_families"] = info["eval_held_out_families"] = held_out(
            path, cfg.held_out_clips, cfg.seed + 1000, cfg.seconds
        )
    export_onnx(net, path, info)  # again, with the evaluation in the metadata
    report["train_s"] = round(time.perf_counter() - t0, 1)
    report["model"] = str(path)
    report["model_bytes"] = path.stat().st_size
    return report
