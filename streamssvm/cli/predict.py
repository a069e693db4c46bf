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
    labels_read = LabelsRead(model)
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
                    labels_read.update(y)
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
    warning = labels_read.warning(fmt)
    if warning:
        print(warning, file=sys.stderr)
    if got:
        return 128 + got[0]
    return 1 if n == 0 and not closed else 0


def nbest_of(model, rec, k):
    """The ``k`` best outputs of a record as JSON: ``[{"output": ..., "score": ...}, ...]``."""
    from ..step import jsonable
    y = rec.y if rec.y is not None else ([] if model.task == "sequence" else 0)
    x, _ = model.coerce_input(rec.x, y)
    return [{"output": jsonable(o), "score": float(s)} for o, s in model.predict_nbest_one(x, k)]


class LabelsRead:
    """The labels ``predict`` read from the records, against the labels the model knows: when
    not one of them is a label of the model, the records most likely carry no labels and a
    feature column was read as the label (a CoNLL file of several columns without its tag
    column, a CSV whose last feature column is named ``label``), so the score is meaningless;
    :meth:`warning` says so and how to read the file as unlabeled."""

    def __init__(self, model):
        self.labels_of = model.labels_of
        self.known = None if model.task is None else set(model.classes)
        self.n = self.n_unknown = 0
        self.examples = []

    def update(self, y):
        if self.known is None:
            return
        for v in self.labels_of(y):
            self.n += 1
            try:
                hit = v in self.known
            except TypeError:
                hit = False
            if not hit:
                self.n_unknown += 1
                if len(self.examples) < 3 and v not in self.examples:
                    self.examples.append(v)

    def warning(self, fmt):
        if not self.n or self.n_unknown < self.n:
            return None
        how = {"conll": "?label_column=none reads every column as a feature",
               "csv": "?label=NAME names the label column; a file without one is read as unlabeled",
               "jsonl": "?y_field=NAME names the label field; records without it are read as unlabeled"}.get(
            fmt, "check which field holds the label")
        shown = ", ".join(repr(v) for v in self.examples)
        return (f"warning: none of the {self.n:,} labels read ({shown}, ...) is a label of this model, so the "
                f"score above is meaningless; if the records carry no labels, a feature was read as the label: "
                f"{how}")
