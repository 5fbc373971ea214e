"""The streaming detector: the trained network run by onnxruntime, one intra-op thread.

``Detector(n_streams)`` keeps, per stream (station), the last ``K`` windows' features and the
GRU state between calls, and scores every stream's newest window in one batched run, so a
tick of many stations is a single inference call. It is a plain synchronous class.

When the ``onnx`` package is installed (the ``guard`` extra), the model is loaded with each
1-D convolution and pooling run as its 2-D form of height 1 (``lift_1d``): the same
arithmetic, but onnxruntime has blocked (NCHWc) kernels for 2-D and a per-sample im2col for
1-D, and at 256 stations that halves the convolution's time (the batch: ~0.8 -> ~0.6 ms).
Without ``onnx`` the file is run as it is.

Beside the score, each step leaves the score's logit per stream in ``last_logit``: the
value the model's final sigmoid takes (exposed as a second output at load time, with
``onnx``), which keeps growing where a float32 score has saturated at 1.0. The enrolment's
score calibration (``baseline.py``) compares it with what the station's healthy recording
reached. Without ``onnx`` it is the logit of the score, so it saturates where the score
does (at about +-16.6).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import N_FEATURES
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = ["DEFAULT_MODEL", "Detector", "default_model_path", "expose_logit", "lift_1d", "logit_of"]

DEFAULT_MODEL = "detector.onnx"
F32 = npt.NDArray[np.float32]
LOGIT_OUTPUT = "score_logit"
_EPS = np.float32(2.0**-24)  # the score's logit without its graph output: at most +-16.6


def default_model_path() -> Path:
    """The committed model file shipped in ``rtgate/apps/guard/data``."""
    return Path(str(resources.files("rtgate.apps.guard") / "data" / DEFAULT_MODEL))


_UNARY = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Softplus", "Identity"}
_LIFTED = {"Conv", "MaxPool", "AveragePool"}


def lift_1d(model: Any) -> int:
    """Rewrite an ``onnx.ModelProto`` in place so each 1-D ``Conv`` (constant 3-D weight),
    ``MaxPool`` and ``AveragePool`` runs as 2-D with height 1, between an ``Unsqueeze`` and a
    ``Squeeze`` of axis 2; then drop the ``Squeeze`` -> ``Unsqueeze`` pairs this leaves (also
    across one element-wise op). Returns how many operators were lifted (0: unchanged)."""
    from onnx import helper, numpy_helper

    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:  # axes as an input (opset 13+) keeps the rewrite simple
        return 0
    weights = {t.name: t for t in g.initializer}
    axes = "lift_1d_axis2"  # added to the initializers once something is lifted
    nodes, lifted = [], 0
    for n in g.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        kernel = attrs.get("kernel_shape")
        w = weights.get(n.input[1]) if n.op_type == "Conv" and len(n.input) > 1 else None
        if (
            n.op_type not in _LIFTED
            or len(n.output) != 1  # e.g. MaxPool's indices
            or kernel is None
            or len(kernel) != 1
            or (n.op_type == "Conv" and (w is None or len(w.dims) != 3))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
        ):
            nodes.append(n)
            continue
        tag = f"lift_1d_{lifted}"  # node names may be empty or repeated
        ins = [f"{tag}_in", *n.input[1:]]
        if w is not None:
            ins[1] = f"{tag}_weight"
            w2 = numpy_helper.to_array(w)[:, :, None, :]
            g.initializer.append(numpy_helper.from_array(w2, ins[1]))
        for k in ("kernel_shape", "strides", "dilations"):
            if k in attrs:
                attrs[k] = [1, *attrs[k]]
        if "pads" in attrs:
            attrs["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        out = f"{tag}_out"
        nodes += [
            helper.make_node("Unsqueeze", [n.input[0], axes], [ins[0]], name=ins[0]),
            helper.make_node(n.op_type, ins, [out], name=f"{n.name or tag}_2d", **attrs),
            helper.make_node("Squeeze", [out, axes], [n.output[0]], name=out),
        ]
        lifted += 1
    if lifted:
        g.initializer.append(numpy_helper.from_array(np.array([2], np.int64), axes))
        nodes = _drop_squeeze_pairs(nodes, g)
        used = {i for n in nodes for i in n.input} | {o.name for o in g.output}
        del g.node[:]
        g.node.extend(n for n in nodes if n.op_type != "Constant" or n.output[0] in used)
        del g.value_info[:]  # 3-D shapes of tensors that are now 4-D
        keep = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
    return lifted


def logit_of(scores: npt.ArrayLike) -> F32:
    """The logit of float32 scores, clipped 2^-24 from 0 and 1 (so at most about +-16.6):
    what ``last_logit`` is without the graph's own output, and what an enrolment or a
    baseline falls back to when only scores are known."""
    p = np.clip(np.asarray(scores, np.float32), _EPS, np.float32(1.0) - _EPS)
    out: F32 = np.log(p / (np.float32(1.0) - p))
    return out


def expose_logit(model: Any) -> bool:
    """Add the input of the ``Sigmoid`` that makes ``score`` to an ``onnx.ModelProto``'s
    outputs, as :data:`LOGIT_OUTPUT` (an ``Identity`` of it). False when there is no such
    ``Sigmoid`` (the model is unchanged)."""
    from onnx import TensorProto, helper

    g = model.graph
    sig = next((n for n in g.node if n.op_type == "Sigmoid" and n.output[0] == "score"), None)
    if sig is None or any(o.name == LOGIT_OUTPUT for o in g.output):
        return False
    g.node.append(helper.make_node("Identity", [sig.input[0]], [LOGIT_OUTPUT]))
    g.output.append(helper.make_tensor_value_info(LOGIT_OUTPUT, TensorProto.FLOAT, None))
    return True


def _drop_squeeze_pairs(nodes: list[Any], g: Any) -> list[Any]:
    """``Squeeze(2) -> [unary] -> Unsqueeze(2)`` with nothing else reading the middle: keep the
    tensor 4-D instead (the unary op reads the unsqueezed input)."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    outputs = {o.name for o in g.output}

    def axis(n: Any) -> int | None:
        """The one constant axis of a Squeeze / Unsqueeze: 2 or -2 (else None)."""
        a = consts.get(n.input[1]) if len(n.input) > 1 else None
        if a is None or a.size != 1 or int(a.reshape(-1)[0]) not in (2, -2):
            return None
        return int(a.reshape(-1)[0])

    while True:
        producer = {o: n for n in nodes for o in n.output}
        readers: dict[str, int] = {}
        for n in nodes:
            for i in n.input:
                readers[i] = readers.get(i, 0) + 1

        def only(t: str, readers: dict[str, int] = readers) -> bool:
            return readers.get(t, 0) == 1 and t not in outputs

        for u in nodes:
            if u.op_type != "Unsqueeze" or axis(u) is None or u.output[0] in outputs:
                continue
            mid = producer.get(u.input[0])
            unary = mid if mid is not None and mid.op_type in _UNARY else None
            sq = producer.get(unary.input[0]) if unary is not None else mid
            if sq is None or sq.op_type != "Squeeze" or axis(sq) != axis(u):
                continue
            if not only(sq.output[0]):
                continue
            if unary is not None and not only(unary.output[0]):
                continue
            if unary is not None:  # Squeeze -> op -> Unsqueeze: op on the 4-D tensor
                unary.input[0] = sq.input[0]
                unary.output[0] = u.output[0]
            else:
                for n in nodes:
                    n.input[:] = [sq.input[0] if i == u.output[0] else i for i in n.input]
            nodes = [n for n in nodes if n is not u and n is not sq]
            break
        else:
            return nodes


class Detector:
    """Streaming fault scores for ``n_streams`` streams.

    Raises :class:`ConfigError` when the model file is missing or not a detector.
    """

    def __init__(
        self, model_path: str | Path | None = None, n_streams: int = 1, threads: int = 1
    ) -> None:
        import onnxruntime as ort

        if n_streams < 1:
            raise InvalidRequest(f"n_streams must be >= 1, got {n_streams}")
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise ConfigError(f"detector model not found: {path} (run `rtgate guard train`)")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.lifted = 0  # 1-D operators run as 2-D (see lift_1d)
        self.exact_logit = False  # last_logit from the graph (else the score's logit)
        try:
            self._sess = ort.InferenceSession(
                self._load(path), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise ConfigError(f"cannot load detector model {path}: {e}") from e
        meta = self._sess.get_modelmeta().custom_metadata_map
        try:
            self.k = int(meta["k"])
            self.hidden = int(meta["hidden"])
            n_feat = int(meta["n_features"])
        except (KeyError, ValueError) as e:
            raise ConfigError(f"{path} is not a guard detector (metadata {e})") from e
        if n_feat != N_FEATURES:
            raise ConfigError(f"{path} expects {n_feat} features, this code makes {N_FEATURES}")
        self.info: dict[str, object] = json.loads(meta.get("info", "{}"))
        self.path = path
        self.n_streams = n_streams
        self._stack = np.zeros((n_streams, self.k, N_FEATURES), dtype=np.float32)
        self._spare = np.zeros_like(self._stack)  # the next stack, when all streams step
        self._h = np.zeros((n_streams, self.hidden), dtype=np.float32)
        self._fresh = np.ones(n_streams, dtype=bool)
        self._any_fresh = True
        self.last_logit = np.zeros(n_streams, dtype=np.float32)  # per stream, last step

    def _load(self, path: Path) -> str | bytes:
        """The model for onnxruntime: lifted when ``onnx`` is installed, else the path."""
        try:
            import onnx
        except ImportError:
            return str(path)
        try:
            model = onnx.load(str(path))
            self.lifted = lift_1d(model)
            self.exact_logit = expose_logit(model)
        except Exception:  # not a model onnx understands: let onnxruntime say why
            self.lifted, self.exact_logit = 0, False
            return str(path)
        return model.SerializeToString() if self.lifted or self.exact_logit else str(path)

    def _run(self, stack: F32, h: F32, rows: npt.NDArray[np.int64] | None) -> tuple[F32, F32]:
        """One inference: the scores ``(N,)`` and the new state; ``last_logit`` of the
        streams in ``rows`` (None: all) is set."""
        out = self._sess.run(None, {"stack": stack, "h": h})
        score = np.asarray(out[0], dtype=np.float32).reshape(-1)
        if self.exact_logit:
            logit = np.asarray(out[2], dtype=np.float32).reshape(-1)
        else:
            logit = logit_of(score)
        if rows is None:
            self.last_logit[:] = logit
        else:
            self.last_logit[rows] = logit
        return score, out[1]

    def warm_up(self) -> None:
        """One run on zeros for every stream, state untouched: onnxruntime's first run
        allocates and picks kernels, which is slow."""
        self._sess.run(None, {"stack": np.zeros_like(self._stack), "h": np.zeros_like(self._h)})
        self.last_logit[:] = 0.0

    def reset(self, stream: int | None = None) -> None:
        """Forget the state of one stream (or all)."""
        sel = slice(None) if stream is None else stream
        self._h[sel] = 0.0
        self._fresh[sel] = True
        self._any_fresh = True

    def step(self, features: npt.ArrayLike, rows: npt.ArrayLike | None = None) -> F32:
        """Fault probability ``(N,)`` of the newest window of each stream.

        ``features``: ``(N, N_FEATURES)``, one row per stream in ``rows`` (default: all
        streams, in order). A fresh stream's stack is filled with its first window.
        Stepping all streams swaps two stacks in place (no copies gathered per call).
        """
        f = np.asarray(features, dtype=np.float32)
        if rows is None:  # every stream in order: in place, no gathered copies
            if f.shape != (self.n_streams, N_FEATURES):
                raise InvalidRequest(
                    f"features must be ({self.n_streams}, {N_FEATURES}), got {f.shape}"
                )
            stack, self._stack, self._spare = self._spare, self._spare, self._stack
            stack[:, :-1] = self._spare[:, 1:]
            stack[:, -1] = f
            if self._any_fresh:
                stack[self._fresh] = f[self._fresh, None, :]
                self._fresh[:] = False
                self._any_fresh = False
            score, self._h = self._run(stack, self._h, None)
            return score
        idx = np.asarray(rows, dtype=np.int64)
        if f.ndim != 2 or f.shape != (len(idx), N_FEATURES):
            raise InvalidRequest(f"features must be ({len(idx)}, {N_FEATURES}), got {f.shape}")
        stack = self._stack[idx]
        stack[:, :-1] = stack[:, 1:]
        stack[:, -1] = f
        fresh = self._fresh[idx]
        if fresh.any():
            stack[fresh] = f[fresh, None, :]
            self._fresh[idx] = False
            self._any_fresh = bool(self._fresh.any())
        self._stack[idx] = stack
        score, h = self._run(stack, self._h[idx], idx)
        self._h[idx] = h
        return score
