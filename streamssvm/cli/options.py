"""The options and helpers every command shares: the learner's options and the model they make,
sources, sinks and dead letters, the settings a checkpoint records, signal handling."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading


def param_option(group, cls, name, flag=None, help=None):
    """An option for the parameter ``name`` of ``cls``'s ``params`` spec (:mod:`streamssvm.params`):
    ``--name`` (or ``flag``, whose name is then the attribute), read with :meth:`Param.parse`,
    defaulting to the spec's default, its help the spec's text (or ``help``) followed by
    :meth:`Param.describe`; so the command line's defaults are the library's.

    >>> import argparse
    >>> from streamssvm.engine import Engine
    >>> p = argparse.ArgumentParser()
    >>> _ = param_option(p, Engine, "keep")
    >>> p.parse_args(["--keep", "5"]).keep, p.parse_args([]).keep
    (5, 3)
    """
    from ..params import spec
    row = spec(cls, name)

    def parse(text):
        try:
            return row.parse(text)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = row.type
    text = f"{help or row.help}; {row.describe()}"
    flag = flag or "--" + name.replace("_", "-")
    dest = flag.lstrip("-").replace("-", "_")
    if row.type == "bool":
        return group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=row.default,
                                  help=text)
    metavar = "{" + ",".join(map(str, row.choices)) + "}" if row.type == "choice" else dest.upper()
    kw = {"choices": list(row.choices)} if row.type == "choice" else {}
    return group.add_argument(flag, dest=dest, type=parse, default=row.default, help=text, metavar=metavar, **kw)


#: the learners of ``--learner`` and their classes in :mod:`streamssvm.learners`
LEARNERS = {"bcfw": "BCFW", "sgd": "SGD", "cp": "CuttingPlane", "memoir": "MEMOIR", "bmrm": "BMRM",
            "pragam": "Pragam", "gdmm": "GDMM"}
#: learner parameters whose option is not ``--<name>`` (``run --batch-size`` is the engine's batches)
FLAGS = {"batch_size": "--batch"}
#: the model options that are not a learner's parameters
MODEL_KEYS = ("task", "hierarchy", "learner", "loss", "n_features", "scale")
#: the tasks whose estimators take ``scale`` (``--scale``), on by default
SCALED_TASKS = ("multiclass", "multilabel")


def _flag(name):
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _dest(name):
    """The attribute of the parsed arguments holding learner parameter ``name``."""
    return _flag(name)[2:].replace("-", "_")


def learner_class(key):
    """The learner class of ``--learner key``."""
    import streamssvm.learners as learners
    return getattr(learners, LEARNERS[key])


def learner_rows():
    """``{parameter name: [(learner key, Param row)]}`` over the learners' command-line rows."""
    rows = {}
    for key in LEARNERS:
        for row in learner_class(key).params:
            if row.cli:
                rows.setdefault(row.name, []).append((key, row))
    return rows


def _grouped(pairs):
    """``"bcfw, sgd 0.001; memoir 1e-06"``: learner keys grouped by a shared text."""
    by = {}
    for key, text in pairs:
        by.setdefault(text, []).append(key)
    return "; ".join(f"{'/'.join(keys)} {text}" for text, keys in by.items())


def _learner_help(name, rows):
    keys = "/".join(k for k, _ in rows)
    kinds = _grouped((k, r.describe(default=False)) for k, r in rows)
    if len({r.describe(default=False) for _, r in rows}) == 1:
        kinds = rows[0][1].describe(default=False)
    defaults = _grouped((k, "none" if r.default is None else str(r.default)) for k, r in rows)
    if len({str(r.default) for _, r in rows}) == 1:
        defaults = "none" if rows[0][1].default is None else str(rows[0][1].default)
    text = f"{keys}: {rows[0][1].help}; {kinds} (default: the learner's own: {defaults})"
    return text.replace("%", "%%")


def add_learner_args(p):
    """The model's options: ``--learner``, one option per parameter of the learners' ``params``
    rows (read by the chosen learner's row, :meth:`Param.parse`; not given: the learner's own
    default), and the estimator's ``--loss`` and ``--n-features``."""
    g = p.add_argument_group("learner")
    g.add_argument("--learner", default=None, choices=list(LEARNERS),
                   help="learning algorithm: bcfw (block-coordinate Frank-Wolfe), sgd (Pegasos), cp (n-slack "
                        "cutting plane), memoir (extreme classification), bmrm / pragam (batch solvers over "
                        "the held window, run by refinement), gdmm (factorwise dual decomposition: sequences, "
                        "and multi-label with pairwise label factors); "
                        "default: memoir for --task extreme, else bcfw")
    for name, rows in learner_rows().items():
        flag, dest = _flag(name), _dest(name)
        if all(r.type == "bool" for _, r in rows):
            g.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None,
                           help=_learner_help(name, rows))
        else:
            g.add_argument(flag, dest=dest, default=None, metavar=dest.upper(), help=_learner_help(name, rows))
    g.add_argument("--loss", default=None, choices=["normalized", "hamming"],
                   help="sequence: Hamming loss per token (default; better for tagging, see "
                        "bench/results/quality_sequence.md) or normalized per sentence (the OCR papers' loss; "
                        "the default with --learner gdmm)")
    g.add_argument("--n-features", type=int, default=None,
                   help="hashing trick with this many buckets (default None: a growing vocabulary)")
    g.add_argument("--scale", dest="scale", action=argparse.BooleanOptionalAction, default=None,
                   help="online feature scaling: each feature divided by the running RMS of its non-zero "
                        "values, learned on the stream, saved with the model, applied by predict (0/1 "
                        "features keep their values); default: on for --task multiclass and multilabel, "
                        "not available for sequence and extreme (see the README's 'Feature scaling')")


def learner_params(args):
    """The chosen learner's arguments: each of its parameters given on the command line, read
    by its row (a parameter of another learner is ignored); one not given keeps the learner's
    default (every learner seeds by default, so a run repeats)."""
    if args.learner is None:  # --task extreme implies MEMOIR
        args.learner = "memoir" if args.task == "extreme" else "bcfw"
    out = {}
    for row in learner_class(args.learner).params:
        if not row.cli:
            continue
        value = getattr(args, _dest(row.name), None)
        if value is None:
            continue
        out[row.name] = row.parse(value) if isinstance(value, str) else row.check(value)
    return out


def make_model(args):
    """The model of ``run``'s options: the learner (:func:`learner_params`) inside the task's
    estimator."""
    import streamssvm as ss
    hierarchy = load_hierarchy(getattr(args, "hierarchy", None), args.task)
    kw = learner_params(args)
    scale = resolve_scale(args)
    if args.task == "extreme" or args.learner == "memoir":
        if args.task != "extreme" or args.learner != "memoir":
            raise ValueError(f"--task extreme goes with --learner memoir (got --task {args.task} "
                             f"--learner {args.learner})")
        return ss.ExtremeClassifier(learner=ss.learners.MEMOIR(**kw), n_features=args.n_features)
    if args.learner == "gdmm" and args.task not in ("sequence", "multilabel"):   # GDMM (Yen et al. 2016)
        raise ValueError("--learner gdmm learns --task sequence or --task multilabel")
    learner = learner_class(args.learner)(**kw)
    if args.task == "multiclass":
        return ss.MulticlassSSVM(learner=learner, n_features=args.n_features, scale=scale)
    if args.task == "multilabel":
        return ss.MultiLabelSSVM(learner=learner, n_features=args.n_features, hierarchy=hierarchy,
                                 pairwise=True if args.learner == "gdmm" else "auto", scale=scale)
    return ss.SequenceTagger(learner=learner, n_features=args.n_features, loss=args.loss)


def resolve_scale(args):
    """``--scale`` / ``--no-scale``, or the task's default (on where the estimator takes it);
    ``args.scale`` is set to the value used, as the checkpoint's settings record it."""
    scale = getattr(args, "scale", None)
    if scale is None:
        scale = args.task in SCALED_TASKS
    elif scale and args.task not in SCALED_TASKS:
        raise ValueError(f"--scale is for --task {' / '.join(SCALED_TASKS)} (a {args.task} model's features "
                         "are indicators or counts, taken as they are)")
    args.scale = scale
    return scale


def load_hierarchy(path, task):
    """``--hierarchy FILE``: JSON ``{child: parent}`` / ``{child: [parents]}`` (null: a root) or a
    list of ``[child, parent]`` pairs, for ``--task multilabel``."""
    if path is None:
        return None
    if task != "multilabel":
        raise ValueError("--hierarchy goes with --task multilabel")
    import json
    with open(path) as f:
        h = json.load(f)
    if isinstance(h, list):
        h = [tuple(e) if isinstance(e, list) else e for e in h]
    return h


def open_sink(uri, on_closed=None):
    """The sink of ``--sink`` / ``--dead-letter``: ``kafka://HOST:PORT/TOPIC``, a JSONL file
    (``file://PATH`` or a path; ``-`` is the standard output). ``on_closed()`` is called when
    the reader of a pipe closes it (:class:`~streamssvm.connectors.base.JSONLSink`)."""
    from streamssvm.connectors.base import JSONLSink
    if uri.startswith("kafka://"):
        from streamssvm.connectors.kafka import KafkaSink, parse_kafka_uri
        d = parse_kafka_uri(uri)
        return KafkaSink(d["bootstrap"], d["topic"])
    return JSONLSink(uri[len("file://"):] if uri.startswith("file://") else uri, on_closed=on_closed)


def say_saved(path, model):
    """``--save``: one line on stderr naming what was saved where."""
    size = os.path.getsize(path)
    print(f"saved the model ({type(model).__name__}, {model.n_blocks if hasattr(model, 'n_blocks') else '?'} "
          f"examples held, {size / 1e6:.1f} MB) to {path}; use it with: streamssvm predict --model {path} "
          f"--source ...", file=sys.stderr)


def read_test(uri, task):
    """``run --test file://...``: the held-out (x, y) pairs scored at each snapshot."""
    if uri is None:
        return None
    from streamssvm.connectors.files import open_source
    src = open_source(uri)
    try:
        return [(rec.x, rec.y) for rec in src if rec is not None]
    finally:
        src.close()


def run_settings(args):
    """What a checkpoint must agree with to be resumed: the task and the model's settings
    (run-control options such as --max-examples or --sink may change between runs)."""
    if getattr(args, "model", None):
        return {"task": args.task, "model": os.path.abspath(args.model)}
    learner = learner_class(args.learner)(**learner_params(args))   # every parameter, given or default
    if hasattr(args, "scale"):
        resolve_scale(args)
    return {**{k: getattr(args, k, None) for k in MODEL_KEYS},
            **{_dest(r.name): getattr(learner, r.name) for r in learner.params if r.cli}}


class CliDeadLetters:
    """A ``DeadLetterSink`` factory for the CLI: the first few bad records are reported on stderr
    (one line each), the rest only counted; the summary names where they went."""

    SHOW = 5

    @staticmethod
    def make(uri):
        from streamssvm.connectors.base import DeadLetterSink

        class Sink(DeadLetterSink):
            def send(self, raw, reason, origin="", size=None):
                super().send(raw, reason, origin, size)
                if self.count <= CliDeadLetters.SHOW:
                    print(f"bad record ({origin}): {str(reason)[:200]}", file=sys.stderr, flush=True)
                    if self.count == CliDeadLetters.SHOW:
                        print("further bad records are counted only; summary at the end", file=sys.stderr,
                              flush=True)

        d = Sink(open_sink(uri)) if uri else Sink()
        d.warn = False
        return d


def open_file_or_kafka(args, dead, require_label=True):
    """The source of ``run`` / ``predict``, with ``dead`` as its dead-letter sink; ``--task
    multilabel`` implies multi-label parsing of libsvm and CSV files (CSV label sets split on
    ``;`` unless ``multilabel_sep=`` says otherwise); ``require_label=False`` (``predict``) reads
    JSONL records without ``y``, CSV files without the label column and one-column CoNLL files
    as unlabeled records. Returns (source, file format or None for Kafka)."""
    if args.source.startswith("kafka://"):
        from streamssvm.connectors.kafka import open_kafka
        reset = getattr(args, "on_offset_reset", None)
        src = open_kafka(args.source, dead_letter=dead, **({"on_offset_reset": reset} if reset else {}))
        src.require_label = require_label   # predict: messages without "y" are unlabeled records
        return src, None
    from streamssvm.connectors.files import detect_format, open_source, parse_file_uri
    path, opts = parse_file_uri(args.source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    fmt = detect_format(path, opts.get("format"))
    kw = {"dead_letter": dead, "format": fmt}
    if getattr(args, "task", None) == "multilabel" and fmt in ("libsvm", "csv") and "multilabel" not in opts:
        kw["multilabel"] = True
    if not require_label and fmt in ("jsonl", "csv", "conll") and "require_label" not in opts:
        kw["require_label"] = False
    return open_source(args.source, **kw), fmt


def likely_cause(args, fmt, dead):
    """One sentence naming the likely cause of a run whose records are (nearly) all bad."""
    reason = dead.reasons.most_common(1)[0][0] if dead.reasons else "?"
    head = b""
    if fmt is not None:
        from streamssvm.connectors.files import parse_file_uri
        with open(parse_file_uri(args.source)[0], "rb") as f:
            for raw in f:
                if raw.strip():
                    head = raw.strip()
                    break
    if fmt != "jsonl" and head.startswith(b"{"):
        return f"the file looks like JSONL but was read as {fmt}: add ?format=jsonl to the source"
    if fmt == "conll" and args.task != "sequence":
        return "a CoNLL file holds tag sequences: use --task sequence"
    if args.task == "sequence" and fmt not in (None, "conll", "jsonl"):
        return f"--task sequence needs sequences (CoNLL or JSONL with lists), not {fmt} rows"
    if fmt == "csv":
        return (f"most common reason: {reason}; a CSV needs numeric feature columns and its label column "
                f"named with ?label=COLUMN (default: label)")
    return f"most common reason: {reason}; check the format (read as {fmt or 'kafka'}) and --task {args.task}"


@contextlib.contextmanager
def graceful_signals(on_signal):
    """SIGINT / SIGTERM call ``on_signal(signum)`` once (the run finishes the record in
    progress, checkpoints and exits 128 + signum); a second signal interrupts at once."""
    got = []

    def handler(signum, frame):
        if got:
            signal.signal(signum, signal.SIG_DFL)
            raise KeyboardInterrupt
        got.append(signum)
        print(f"\n{signal.Signals(signum).name}: stopping after the current record "
              f"(again to stop at once)", file=sys.stderr, flush=True)
        on_signal(signum)

    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Refused(Exception):
    """A refusal with a one-line message (exit code 2)."""


def strict_json(v):
    """JSON-ready copy with ``None`` for non-finite numbers (``Infinity`` is not JSON)."""
    from ..step import jsonable
    return jsonable(v)


def certificate_text(c):
    def f(v, fmt=".6g"):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)
    if c.get("gap") is None or (isinstance(c["gap"], float) and not math.isfinite(c["gap"])):
        return f"primal {f(c.get('primal'))} (no dual certificate: primal only)  blocks {c.get('n_blocks')}"
    return f"gap {f(c['gap'])}  primal {f(c['primal'])}  dual {f(c['dual'])}  blocks {c['n_blocks']}"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (unless it already names one)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if ("default" in h or action.default is argparse.SUPPRESS or not action.option_strings
                or action.required):
            return h
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return h
        return h + " (default: %(default)s)"
