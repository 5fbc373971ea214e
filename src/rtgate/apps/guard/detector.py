"""The streaming detector: the trained network run by onnxruntime, one intra-op thread.

``Detector(n_streams)`` keeps, per stream (station), the last ``K`` windows' features and the
GRU state between calls, and scores every stream's newest window in one batched run, so a
tick of many stations is a single inference call. It is a plain synchronous class.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import N_FEATURES
from rtgate.errors import ConfigError, InvalidRequest

__all__ = ["DEFAULT_MODEL", "Detector", "default_model_path"]

DEFAULT_MODEL = "detector.onnx"
F32 = npt.NDArray[np.float32]


def default_model_path() -> Path:
    """The committed model file shipped in ``rtgate/apps/guard/data``."""
    return Path(str(resources.files("rtgate.apps.guard") / "data" / DEFAULT_MODEL))


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
        try:
            self._sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
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
        self._h = np.zeros((n_streams, self.hidden), dtype=np.float32)
        self._fresh = np.ones(n_streams, dtype=bool)

    def reset(self, stream: int | None = None) -> None:
        """Forget the state of one stream (or all)."""
        sel = slice(None) if stream is None else stream
        self._h[sel] = 0.0
        self._fresh[sel] = True

    def step(self, features: npt.ArrayLike, rows: npt.ArrayLike | None = None) -> F32:
        """Fault probability ``(N,)`` of the newest window of each stream.

        ``features``: ``(N, N_FEATURES)``, one row per stream in ``rows`` (default: all
        streams, in order). A fresh stream's stack is filled with its first window.
        """
        f = np.asarray(features, dtype=np.float32)
        idx = np.arange(self.n_streams) if rows is None else np.asarray(rows, dtype=np.int64)
        if f.ndim != 2 or f.shape != (len(idx), N_FEATURES):
            raise InvalidRequest(f"features must be ({len(idx)}, {N_FEATURES}), got {f.shape}")
        stack = self._stack[idx]
        stack[:, :-1] = stack[:, 1:]
        stack[:, -1] = f
        fresh = self._fresh[idx]
        if fresh.any():
            stack[fresh] = f[fresh, None, :]
            self._fresh[idx] = False
        self._stack[idx] = stack
        score, h = self._sess.run(None, {"stack": stack, "h": self._h[idx]})
        self._h[idx] = h
        return np.asarray(score, dtype=np.float32)
