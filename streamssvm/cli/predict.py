"""``streamssvm predict``: predict every record of a source with a saved model."""
from __future__ import annotations

import sys

from .options import CliDeadLetters, open_file_or_kafka, open_sink, graceful_signals


def cmd_predict(args):
    """Predict every record of a source with a saved model; predictions go to the sink (default:
    stdout, one JSON line each); records without a label are predicted alike; with labels in the
    records, the accuracy goes to stderr. ``--nbest K`` adds ``"nbest"``: the K best outputs,
    best first, as ``[{"output": ..., "score": ...}, ...]`` (``predict_nbest_one``; the first is
    the prediction); ``--proba`` adds the probabilities (``predict_proba_one``, and
    ``sequence_proba_one`` of the prediction for a tagger). A reader closing the output pipe (``predict | head``)
    ends the command quietly (exit 0)."""
    import streamssvm as ss

    from ..metrics import ProgressiveMetrics
    from ..step import jsonable, reason_of, send_dead_letter, step
    model = ss.load(args.model)
    task = model.task
    args.task = task
    dead = CliDeadLetters.make(args.dead_letter)
    source, fmt = open_file_or_kafka(args, dead, require_label=False)
    closed = []
    sink = open_sink(args.sink or "-", on_closed=lambda: closed.append(True))
    metrics = ProgressiveMetrics(task)
    n = nbad = 0
    with graceful_signals(lambda s: None) as got:
        try:
            for rec in source:
                if got or closed:
                    break
                if rec is None:
                    continue
                got_one = step(model, rec, learn=False)
                if got_one.bad:
                    nbad += 1
                    send_dead_letter(dead, rec, got_one.reason)
                    continue
                out = {"key": rec.key, "prediction": jsonable(got_one.prediction)}
                if args.nbest:
                    try:
                        out["nbest"] = nbest_of(model, rec, args.nbest)
                    except Exception as e:  # noqa: BLE001 - one record never stops the stream
                        nbad += 1
                        send_dead_letter(dead, rec, reason_of(e))
                        continue
                n += 1
                p, y = got_one.prediction, got_one.y
                if getattr(args, "proba", False):
                    out["proba"] = jsonable(model.predict_proba_one(got_one.x))
                    if task == "sequence":
                        out["sequence_proba"] = jsonable(model.sequence_proba_one(got_one.x, p))
                sink.write(out)
                if rec.y is not None:
                    metrics.update(y, p)
        finally:
            source.close()
            sink.close()
            dead.close()
    nbad += source.n_bad
    m = metrics.get()
    msg = f"predicted {n:,} records with {args.model} ({type(model).__name__})"
    if metrics.n:
        from ..engine import progress_metrics
        msg += f"; {progress_metrics(m)}"
    if nbad:
        msg += f"; bad records: {nbad:,}"
    if closed:
        msg += "; stopped: the reader closed the output"
    print(msg, file=sys.stderr)
    if got:
        return 128 + got[0]
    return 1 if n == 0 and not closed else 0


def nbest_of(model, rec, k):
    """The ``k`` best outputs of a record as JSON: ``[{"output": ..., "score": ...}, ...]``."""
    from ..step import jsonable
    y = rec.y if rec.y is not None else ([] if model.task == "sequence" else 0)
    x, _ = model.coerce_input(rec.x, y)
    return [{"output": jsonable(o), "score": float(s)} for o, s in model.predict_nbest_one(x, k)]
