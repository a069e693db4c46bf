"""A model you can read: :func:`summarize` (what ``streamssvm inspect model.ssvm`` prints: size,
lambda, examples held, the certificate, the top-weighted features of every label or tag, the
transition table of a chain) and :func:`explain` (``Estimator.explain_one``: how much each
feature of an input adds to the score of the predicted output and of the runner-up).

Weights are read with the scale folded in (:mod:`streamssvm.scoring`): the numbers are the
model's scores, ``score(x, y) = sum_f x_f W[f, y] (+ transitions)``. Feature 0 is the bias
feature (always 1). Names come from the feature index: the name itself for a growing
vocabulary, ``x[j]`` for column j of array input, ``#b`` for hashing bucket b (hashing keeps no
names).
"""
from __future__ import annotations

import numpy as np

#: class rows x columns above which ``summarize`` does not densify an ExtremeClassifier's rows
DENSE_MAX = 20_000_000


def feature_name(features, j):
    """The readable name of feature column ``j`` of a :class:`streamssvm.features.FeatureIndex`."""
    if j == 0:
        return "(bias)"
    if features.n_features is not None:
        return f"#{j - 1}"
    if features.array_dim is not None:
        return f"x[{j - 1}]"
    return features.names[j - 1] if j - 1 < len(features.names) else f"#{j}"


def _output_labels(model):
    """The labels the weight columns stand for (a hierarchy: its nodes)."""
    return list(model._labels.labels)


def emission_weights(model):
    """(features x labels) weights with the scale folded in, or None (nothing learned, or an
    ExtremeClassifier too large to densify)."""
    lr = model._learner
    if lr is None or len(model._labels) == 0:
        return None
    if model.task == "extreme":
        if lr.store is None or lr.store.n_rows * max(lr.dim, 1) > DENSE_MAX:
            return None
        return lr.averaged_weights().T
    return model._score_tables().emission_weights()


def summarize(model, top=10, certify=True):
    """A JSON-ready dict describing ``model`` (see the module docstring); ``top`` features per
    label; ``certify``: compute the certificate (a full pass over the held examples)."""
    from .step import jsonable
    lr = model._learner
    f = model._features
    space = "hashing" if f.n_features is not None else "array" if f.array_dim is not None else "vocabulary"
    out = {"estimator": type(model).__name__, "task": model.task,
           "learner": {"class": type(model.learner).__name__, "params": jsonable(dict(model.learner._get_params()))},
           "lambda": float(lr.effective_lam() if lr is not None else model.learner.effective_lam()),
           "examples_held": int(model.n_blocks), "n_labels": len(model._labels),
           "labels": jsonable(_output_labels(model)[:100]), "n_features": int(f.dim - 1), "feature_space": space}
    if getattr(model, "_hier", None) is not None:
        out["leaves"] = jsonable(model._hier.leaves)
    try:
        W = emission_weights(model)
    except NotImplementedError as e:   # a learner without dense score tables (GDMM)
        W = None
        out["weights"] = {"note": str(e)}
    if W is not None:
        out["weights"] = {"shape": list(W.shape), "nonzero": int(np.count_nonzero(W)),
                          "norm": float(np.linalg.norm(W))}
        labs = _output_labels(model)
        per = []
        for c in range(W.shape[1]):
            col = W[:, c]
            order = np.argsort(-col, kind="stable")[:top]
            per.append({"label": jsonable(labs[c]),
                        "features": [{"feature": jsonable(feature_name(f, int(j))), "weight": float(col[j])}
                                     for j in order if col[j] != 0.0]})
        out["top_features"] = per
    elif model.task == "extreme" and lr is not None:
        out["weights"] = {"note": f"more than {DENSE_MAX:,} class-row entries: top features not listed"}
    if W is not None and model.task in ("sequence", "multilabel"):
        T, B = model._score_tables().transitions()
        labs = jsonable(_output_labels(model)[:T.shape[0]])
        if model.task == "sequence" and model.transitions:
            out["transitions"] = {"tags": labs, "table": T.tolist(), "start": B[0].tolist(), "end": B[1].tolist()}
        elif model.task == "multilabel" and getattr(model, "pairwise", False):
            out["pairwise"] = {"labels": labs, "table": np.triu(T, 1).tolist()}
    if certify:
        out["certificate"] = jsonable(model.certificate().to_dict())
    return out


def text(summary, top=10):
    """The readable form of :func:`summarize`'s dict."""
    s = summary
    lines = [f"model             {s['estimator']} ({s['task']})",
             f"learner           {s['learner']['class']}  lambda {s['lambda']:.6g}",
             f"examples held     {s['examples_held']}",
             f"labels            {s['n_labels']}: {', '.join(map(str, s['labels'][:20]))}"
             f"{' ...' if s['n_labels'] > 20 else ''}",
             f"features          {s['n_features']} ({s['feature_space']})"]
    if "size_bytes" in s:
        lines.append(f"file size         {s['size_bytes']:,} bytes")
    w = s.get("weights")
    if w and "shape" in w:
        lines.append(f"weights           {w['shape'][0]} x {w['shape'][1]}, {w['nonzero']:,} non-zero, "
                     f"norm {w['norm']:.6g}")
    elif w:
        lines.append(f"weights           {w['note']}")
    c = s.get("certificate")
    if c:
        def num(v):
            return "n/a" if v is None else f"{v:.6g}"
        what = (f"gap {num(c.get('gap'))}  primal {num(c.get('primal'))}  dual {num(c.get('dual'))}"
                if c.get("gap") is not None else f"primal {num(c.get('primal'))} (no dual certificate: primal only)")
        lines.append(f"certificate       {what}  blocks {c.get('n_blocks')}  exact {c.get('exact')}")
    for per in s.get("top_features", []):
        feats = ", ".join(f"{f['feature']} {f['weight']:+.4g}" for f in per["features"][:top])
        lines.append(f"top features of {per['label']!s}: {feats or '(none)'}")
    tr = s.get("transitions") or s.get("pairwise")
    if tr:
        tags = [str(t) for t in tr.get("tags", tr.get("labels"))]
        width = max([len(t) for t in tags] + [8])
        title = "transitions (row: previous tag, column: next tag)" if "tags" in tr else "pairwise (both on)"
        lines.append(title)
        lines.append(" " * (width + 1) + " ".join(t.rjust(width) for t in tags))
        rows = list(zip(tags, tr["table"]))
        if "start" in tr:
            rows += [("(start)", tr["start"]), ("(end)", tr["end"])]
        for name, row in rows:
            lines.append(name.ljust(width + 1) + " ".join(f"{v:+.3g}".rjust(width) for v in row))
    return "\n".join(lines)


def _contributions(model, x, outputs):
    """Per-feature contributions to each output's score: {name: [c_output, ...]} in the
    order of the features of ``x``, and the part of each score that is not per feature."""
    lab_index = {lab: i for i, lab in enumerate(_output_labels(model))}
    W = emission_weights(model)
    f = model._features
    if model.task == "sequence":
        tok_ptr, fidx, fval = f.encode_tokens(x, grow=False)
        tokens = [(t, fidx[tok_ptr[t]:tok_ptr[t + 1]], fval[tok_ptr[t]:tok_ptr[t + 1]])
                  for t in range(len(tok_ptr) - 1)]
    else:
        _, fidx, fval = model._encode_scaled(x)   # the values the model scores (scale=True)
        tokens = [(None, fidx, fval)]
    rows = {}
    for t, idx, val in tokens:
        for j, v in zip(idx, val):
            j = int(j)
            name = feature_name(f, j)
            key = name if t is None else f"{t}:{name}"
            r = rows.setdefault(key, {"feature": name, "value": float(v), "contributions": [0.0] * len(outputs)})
            if t is not None:
                r["token"] = t
            for q, y in enumerate(outputs):
                cols = _columns(model, y, t, lab_index)
                if j < W.shape[0]:
                    r["contributions"][q] += float(v) * float(sum(W[j, c] for c in cols))
    return list(rows.values())


def _columns(model, y, t, lab_index):
    """The weight columns an output switches on (at token t for a sequence)."""
    if model.task == "sequence":
        return [lab_index[y[t]]]
    if model.task == "multilabel":
        if getattr(model, "_hier", None) is not None:
            h = model._hier
            return list(h.closure([h.index[lab] for lab, on in y.items() if on]))
        return [lab_index[lab] for lab, on in y.items() if on]
    return [lab_index[y]]


def explain(model, x, top=None):
    """How ``model`` scores ``x``: the predicted output and the runner-up (the second of
    ``predict_nbest_one(x, 2)``), their scores, and every feature of ``x`` with its value and
    its contribution ``value * weight`` to each score (sorted by how much it favours the
    prediction over the runner-up; ``top``: keep that many). ``"rest"`` is the part of each
    score no single feature carries (transitions, start / end, pairwise potentials)."""
    if model._learner is None or len(model._labels) == 0:
        raise ValueError("explain_one needs a fitted model")
    best = model.predict_nbest_one(x, 2)
    outputs = [y for y, _ in best]
    rows = _contributions(model, x, outputs)
    for r in rows:
        c = r["contributions"]
        r["output"] = c[0]
        r["runner_up"] = c[1] if len(c) > 1 else None
        del r["contributions"]
    rows.sort(key=lambda r: -(r["output"] - (r["runner_up"] or 0.0)))
    out = {"output": outputs[0], "score": best[0][1],
           "runner_up": outputs[1] if len(best) > 1 else None,
           "runner_up_score": best[1][1] if len(best) > 1 else None,
           "features": rows[:top] if top else rows}
    out["rest"] = [best[q][1] - sum(r[key] for r in rows) for q, key in enumerate(("output", "runner_up")[:len(best)])]
    return out
