"""A calibrated linear head shared by the intent classifiers, and its safe file format.

Training uses scikit-learn: a linear model wrapped in ``CalibratedClassifierCV`` with
temperature scaling (one parameter fitted on out-of-fold decision values, so the
ranking is unchanged and probabilities are honest). The fitted numbers are then copied
into a :class:`LinearHead`, which predicts with numpy alone.

Models are saved as ``.npz`` with a JSON header, written and read with
``allow_pickle=False``: loading a file runs no code, whoever wrote it (joblib and pickle
would execute whatever the file says, and tie the file to one scikit-learn version).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError

__all__ = ["LinearHead", "fit_head", "load_npz", "save_npz"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class LinearHead:
    """``softmax(beta * (x @ coef + intercept))`` over ``classes``."""

    classes: tuple[str, ...]
    coef: FloatArray  # (features, classes)
    intercept: FloatArray  # (classes,)
    beta: float

    def proba_sparse(self, idx: npt.NDArray[np.intp], vals: FloatArray) -> FloatArray:
        """Probabilities for a sparse feature row given by indices and values."""
        return self._softmax(vals @ self.coef[idx] + self.intercept)

    def proba_dense(self, x: npt.NDArray[np.floating[Any]]) -> FloatArray:
        return self._softmax(np.asarray(x, dtype=np.float64) @ self.coef + self.intercept)

    def _softmax(self, logits: FloatArray) -> FloatArray:
        z = self.beta * logits
        e = np.exp(z - z.max())
        out: FloatArray = e / e.sum()
        return out

    def rank(self, p: FloatArray) -> list[tuple[str, float]]:
        order = np.argsort(-p, kind="stable")
        return [(self.classes[i], float(p[i])) for i in order]

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        return {
            "classes": np.asarray(self.classes, dtype=np.str_),
            "coef": self.coef,
            "intercept": self.intercept,
            "beta": np.asarray(self.beta, dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray[Any, Any]], source: str) -> LinearHead:
        classes = tuple(str(c) for c in arrays["classes"].tolist())
        coef = np.asarray(arrays["coef"], dtype=np.float64)
        intercept = np.asarray(arrays["intercept"], dtype=np.float64)
        if coef.ndim != 2 or coef.shape[1] != len(classes) or intercept.shape != (len(classes),):
            raise ConfigError(f"{source}: model arrays have inconsistent shapes")
        return cls(classes, coef, intercept, float(arrays["beta"]))


def fit_head(
    x: Any,
    labels: Sequence[str],
    *,
    groups: Sequence[int],
    sample_weight: Sequence[float] | None = None,
    model: str = "svc",
    c: float = 1.0,
    seed: int = 0,
) -> LinearHead:
    """Fit a temperature-calibrated linear model (``svc`` or ``logreg``) on ``x``.

    ``groups`` keeps rows derived from one source example (its prefixes) in one
    calibration fold, so calibration is not fitted on leaked predictions.
    """
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold
    from sklearn.svm import LinearSVC

    y = np.asarray(labels)
    classes = np.unique(y)
    if len(classes) < 2:
        raise ConfigError("need at least two intents to train a classifier")
    per_class_groups = min(len(set(np.asarray(groups)[y == k].tolist())) for k in classes)
    if per_class_groups < 2:
        raise ConfigError("every intent needs at least two examples")
    folds = StratifiedGroupKFold(n_splits=min(5, per_class_groups), shuffle=True, random_state=seed)
    cv = list(folds.split(np.zeros(len(y)), y, np.asarray(groups)))
    base: Any
    if model == "svc":
        base = LinearSVC(C=c, random_state=seed)
    elif model == "logreg":
        base = LogisticRegression(C=c, max_iter=3000)
    else:
        raise ValueError(f"unknown model {model!r}")
    clf = CalibratedClassifierCV(base, method="temperature", cv=cv, ensemble=False)
    clf.fit(x, y, sample_weight=None if sample_weight is None else np.asarray(sample_weight))
    fitted = clf.calibrated_classifiers_[0]
    est, calibrator = fitted.estimator, fitted.calibrators[0]
    coef = np.asarray(est.coef_, dtype=np.float64)
    intercept = np.asarray(est.intercept_, dtype=np.float64).reshape(-1)
    if coef.shape[0] != len(classes):  # binary: one decision d, calibrated as logits (-d, d)
        coef = np.vstack([-coef, coef])
        intercept = np.concatenate([-intercept, intercept])
    head = LinearHead(
        tuple(str(k) for k in clf.classes_), coef.T.copy(), intercept, float(calibrator.beta_)
    )
    # The numpy head must reproduce scikit-learn exactly: check a few training rows.
    rows = x[: min(8, x.shape[0])]
    expect = clf.predict_proba(rows)
    got = np.vstack([_row_proba(head, rows[i]) for i in range(rows.shape[0])])
    if not np.allclose(got, expect, rtol=0.0, atol=1e-6):
        raise RuntimeError("exported linear head disagrees with scikit-learn's predict_proba")
    return head


def _row_proba(head: LinearHead, row: Any) -> FloatArray:
    if hasattr(row, "indices"):  # one row of a scipy sparse matrix
        return head.proba_sparse(np.asarray(row.indices, dtype=np.intp), np.asarray(row.data))
    return head.proba_dense(np.asarray(row).reshape(-1))


def save_npz(
    path: str | Path, kind: str, arrays: Mapping[str, np.ndarray[Any, Any]], meta: Mapping[str, Any]
) -> None:
    """Write ``arrays`` and a JSON header (``kind`` names the model format)."""
    header = json.dumps({"format": kind, **meta}, ensure_ascii=False)
    payload: dict[str, Any] = {"__header__": np.asarray(header, dtype=np.str_), **arrays}
    with Path(path).open("wb") as f:
        np.savez_compressed(f, **payload)


def load_npz(path: str | Path, kind: str) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, Any]]:
    """Read a file written by :func:`save_npz`; ``ConfigError`` when it is not one."""
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError(f"{path}: not a readable model file: {e}") from e
    try:
        meta = json.loads(str(arrays.pop("__header__")))
    except (KeyError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: model file has no valid header") from e
    if not isinstance(meta, dict) or meta.get("format") != kind:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ConfigError(f"{path}: expected a {kind!r} model, found {found!r}")
    return arrays, meta
