"""Fitting and measuring the clause reader (:mod:`rtgate.tiers.clause_reader`).

:func:`fit_clause_reader` learns the role head from the weak labels of the training asks'
clauses (tune, train2, train3; never the FAQ corpus) and the ask-level model from their
whole asks (multi-part against simple), each ask's request probabilities read out of fold
(5 folds by ask) so the ask-level weights see readings like those of a new ask.
:func:`read_asks` reads whole asks of any set with the reader and, beside it, the semantic
check (its probability and its head's ``multi`` / ``ood`` classes), for :func:`auc` and
the shares at a bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.abstention import ask_set
from rtgate.domains.loader import Ask, load_asks, load_classifier
from rtgate.models.embeddings import Embedder
from rtgate.tiers._linear import fit_head
from rtgate.tiers.clause_reader import (
    ASK_FEATURES,
    ClauseReader,
    ask_features,
    role_inputs,
    weak_roles,
)
from rtgate.tiers.embed_classifier import EmbeddingIntentClassifier
from rtgate.tiers.semantic_scope import SemanticScope
from rtgate.tiers.textnorm import lang_of

__all__ = ["FIT_SETS", "auc", "fit_clause_reader", "read_asks"]

FIT_SETS = ("tune", "train2", "train3")


def auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """The area under the ROC curve (ties count half); ``None`` without both labels."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def _intent_head(embedder: Embedder) -> Any:
    model = load_classifier("e5", embedder=embedder)
    assert isinstance(model, EmbeddingIntentClassifier)
    return model.head


def fit_clause_reader(
    sets: Sequence[str] = FIT_SETS,
    *,
    embedder: Embedder | None = None,
    c: float = 1.0,
    seed: int = 0,
) -> tuple[ClauseReader, dict[str, Any]]:
    """A clause reader fitted on the asks of ``sets`` (see the module docstring), and a
    report: rows, weak-label counts, out-of-fold AUC of the ask model by language."""
    from sklearn.linear_model import LogisticRegression

    emb = embedder or Embedder()
    asks: list[Ask] = []
    for name in sets:
        asks += [a for a in load_asks(ask_set(name)) if a.kind in ("simple", "multi")]
    per_ask = [weak_roles(a.text, a.kind) for a in asks]
    texts = sorted({c for parts in per_ask for c, _, _ in parts})
    index = {t: k for k, t in enumerate(texts)}
    vectors = np.concatenate([emb.embed_many(texts[k : k + 64]) for k in range(0, len(texts), 64)])
    x_rows: list[np.ndarray[Any, Any]] = []
    labels: list[str] = []
    groups: list[int] = []
    owner: list[int] = []  # each clause's ask, labelled or not
    all_rows: list[np.ndarray[Any, Any]] = []
    for n, parts in enumerate(per_ask):
        v = vectors[[index[c] for c, _, _ in parts]]
        rows = role_inputs(v, [j for _, j, _ in parts], [c for c, _, _ in parts])
        for row, (_, _, y) in zip(rows, parts, strict=True):
            all_rows.append(row)
            owner.append(n)
            if y is not None:
                x_rows.append(row)
                labels.append("request" if y else "situation")
                groups.append(n)
    x = np.vstack(x_rows)
    role = fit_head(x, labels, groups=groups, model="logreg", c=c, seed=seed)
    # out-of-fold request probabilities for the ask model (5 folds by ask)
    fold = np.asarray([n % 5 for n in range(len(asks))])
    owner_a = np.asarray(owner)
    x_all = np.vstack(all_rows)
    p_req = np.zeros(len(x_all))
    group_a = np.asarray(groups)
    for f in range(5):
        fit_on = fold[group_a] != f
        head = fit_head(
            x[fit_on],
            [lab for lab, k in zip(labels, fit_on, strict=True) if k],
            groups=group_a[fit_on].tolist(),
            model="logreg",
            c=c,
            seed=seed,
        )
        rows = fold[owner_a] == f
        req = head.classes.index("request")
        p_req[rows] = [head.proba_dense(r)[req] for r in x_all[rows]]
    intent_head = _intent_head(emb)
    keep = np.asarray([k != "complex" for k in intent_head.classes])
    feats: list[list[float]] = []
    start = 0
    for n, parts in enumerate(per_ask):
        k = len(parts)
        v = vectors[[index[c] for c, _, _ in parts]]
        q = [intent_head.proba_dense(r)[keep] for r in v]
        q = [r / max(float(r.sum()), 1e-9) for r in q]
        feats.append(ask_features(list(p_req[start : start + k]), q, asks[n].lang == "zh"))
        start += k
    y_ask = np.asarray([a.kind == "multi" for a in asks], dtype=int)
    f_arr = np.asarray(feats)
    oof = np.zeros(len(asks))
    for f in range(5):
        m = LogisticRegression(C=1.0, max_iter=2000).fit(f_arr[fold != f], y_ask[fold != f])
        oof[fold == f] = m.predict_proba(f_arr[fold == f])[:, 1]
    model = LogisticRegression(C=1.0, max_iter=2000).fit(f_arr, y_ask)
    reader = ClauseReader(role, intent_head, model.coef_[0].tolist(), float(model.intercept_[0]),
                          embedder=emb)  # fmt: skip
    lang = np.asarray([a.lang for a in asks])
    report: dict[str, Any] = {
        "sets": list(sets),
        "asks": len(asks),
        "clauses": len(x_all),
        "labelled": {"request": labels.count("request"), "situation": labels.count("situation")},
        "ask_weights": dict(
            zip(
                ("intercept", *ASK_FEATURES),
                [float(model.intercept_[0]), *model.coef_[0].tolist()],
                strict=True,
            )
        ),
        "out_of_fold_auc": {
            g: auc(oof[lang == g].tolist(), y_ask[lang == g].tolist()) for g in ("zh", "en")
        },
    }
    reader.meta["fit"] = report
    return reader, report


def read_asks(
    reader: ClauseReader, names: Sequence[str], scope: SemanticScope | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Each whole ask of each set read by ``reader`` (``p_multi``, requests) and, with
    ``scope``, by the semantic check (``p_out``, its head's ``multi`` and ``ood``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rows = []
        for a in load_asks(ask_set(name)):
            r = reader.read(a.text)
            row: dict[str, Any] = {"text": a.text, "kind": a.kind, "lang": lang_of(a.text),
                                   "p_multi": r.p_multi, "requests": r.requests,
                                   "clauses": len(r.parts)}  # fmt: skip
            if scope is not None:
                head = scope.proba(a.text)
                row.update(p_out=scope.out_of_scope(a.text), head_multi=head.get("multi", 0.0),
                           head_ood=head.get("ood", 0.0))  # fmt: skip
            rows.append(row)
        out[name] = rows
    return out
