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


def add_learner_args(p):
    g = p.add_argument_group("learner")
    g.add_argument("--learner", default=None, choices=["bcfw", "sgd", "cp", "memoir", "bmrm", "pragam", "gdmm"],
                   help="learning algorithm: bcfw (block-coordinate Frank-Wolfe), sgd (Pegasos), cp (n-slack "
                        "cutting plane), memoir (extreme classification), bmrm / pragam (batch solvers over "
                        "the held window, run by refinement), gdmm (factorwise dual decomposition: sequences, "
                        "and multi-label with pairwise label factors); "
                        "default: memoir for --task extreme, else bcfw")
    g.add_argument("--search", default="exact", choices=["exact", "angular", "bisecting", "binary", "sarawagi"],
                   help="sgd/cp with --rescaling slack: exact slack oracle or a budgeted search "
                        "(sarawagi: cp only)")
    g.add_argument("--eps", type=float, default=1e-3, help="cp: violation threshold of new constraints")
    g.add_argument("--max-queries", type=int, default=20, help="sgd: search budget per example")
    g.add_argument("--mips", default="auto", choices=["auto", "exact", "hnsw", "lsh"], help="memoir: MIPS oracle")
    g.add_argument("--variant", default="l2", choices=["l2", "l1"], help="memoir: l2 (Pegasos) or l1 (truncated)")
    g.add_argument("--batch", type=int, default=1, help="memoir: mini-batch size (1: online)")
    g.add_argument("--rows", default="auto", choices=["auto", "dense", "sparse"],
                   help="memoir: class rows (auto: dense for narrow arrays, sparse for dicts / wide input)")
    g.add_argument("--max-dirty", type=int, default=None, help="memoir: re-index after this many changed rows")
    g.add_argument("--ef", type=int, default=None, help="memoir --mips hnsw: search breadth")
    g.add_argument("--lam", type=float, default=None,
                   help="regularization lambda (default: the learner's own: bcfw 0.001, following the number "
                        "n of held examples as 6/n beyond 6,000; memoir 1e-6; the others 0.001)")
    g.add_argument("--replay", type=int, default=1,
                   help="bcfw/gdmm: block steps on held examples per new example; cp: held examples revisited "
                        "(default: 1)")
    g.add_argument("--sampling", default="gap", choices=["gap", "uniform"], help="block sampling (default: gap)")
    g.add_argument("--step", default=None, choices=["fw", "pairwise", "away"],
                   help="bcfw step type (default: pairwise as the README recommends; fw with --rescaling slack)")
    g.add_argument("--cache", action=argparse.BooleanOptionalAction, default=None,
                   help="bcfw per-block oracle cache (Osokin et al., Minding the gaps, Alg. 5; default: on, off "
                        "with --rescaling slack)")
    g.add_argument("--loss", default=None, choices=["normalized", "hamming"],
                   help="sequence: Hamming loss per token (default; better for tagging, see "
                        "bench/results/quality_sequence.md) or normalized per sentence (the OCR papers' loss; "
                        "the default with --learner gdmm)")
    g.add_argument("--rescaling", default="margin", choices=["margin", "slack"],
                   help="margin or slack rescaling of the loss")
    g.add_argument("--capacity", type=int, default=100_000, help="bcfw: blocks (examples) held at most")
    g.add_argument("--eviction", default="fifo", choices=["fifo", "reservoir"], help="bcfw: which held block leaves when full")
    g.add_argument("--n-features", type=int, default=None, help="hashing trick with this many buckets (default None: a growing vocabulary)")
    g.add_argument("--seed", type=int, default=0, help="random seed")


def make_model(args):
    import streamssvm as ss
    hierarchy = load_hierarchy(getattr(args, "hierarchy", None), args.task)
    lam = {} if args.lam is None else {"lam": args.lam}   # no --lam: each learner's own default
    if args.learner is None:  # --task extreme implies MEMOIR
        args.learner = "memoir" if args.task == "extreme" else "bcfw"
    if args.task == "extreme" or args.learner == "memoir":
        if args.task != "extreme" or args.learner != "memoir":
            raise ValueError(f"--task extreme goes with --learner memoir (got --task {args.task} "
                             f"--learner {args.learner})")
        extra = {k: v for k, v in (("max_dirty", args.max_dirty), ("ef", args.ef)) if v is not None}
        learner = ss.learners.MEMOIR(variant=args.variant, mips=args.mips, **lam, batch_size=args.batch,
                                     seed=args.seed, rows=args.rows, rescaling=args.rescaling, **extra)
        return ss.ExtremeClassifier(learner=learner, n_features=args.n_features)
    if args.learner == "sgd":
        learner = ss.learners.SGD(**lam, rescaling=args.rescaling, search=args.search,
                                  max_queries=args.max_queries, seed=args.seed)
    elif args.learner == "bmrm":
        learner = ss.learners.BMRM(**lam, rescaling=args.rescaling, eps=args.eps, capacity=args.capacity)
    elif args.learner == "pragam":
        learner = ss.learners.Pragam(**lam, eps=args.eps, capacity=args.capacity, seed=args.seed)
    elif args.learner == "gdmm":   # GDMM (Yen et al. 2016): chains, pairwise multi-label
        if args.task not in ("sequence", "multilabel"):
            raise ValueError("--learner gdmm learns --task sequence or --task multilabel")
        learner = ss.learners.GDMM(**lam, replay=args.replay, capacity=args.capacity, seed=args.seed)
    elif args.learner == "cp":
        learner = ss.learners.CuttingPlane(**lam, rescaling=args.rescaling, search=args.search, eps=args.eps,
                                           max_queries=max(args.max_queries, 2), seed=args.seed,
                                           replay=args.replay)
    else:
        # BCFW's slack rescaling and distributed BCFW (--workers) take fw steps without cache (so far)
        plain = args.rescaling == "slack" or bool(getattr(args, "workers", None))
        step = args.step or ("fw" if plain else "pairwise")
        cache = (not plain) if args.cache is None else args.cache
        learner = ss.learners.BCFW(**lam, replay=args.replay, sampling=args.sampling, step=step,
                                   cache=cache, capacity=args.capacity, eviction=args.eviction,
                                   rescaling=args.rescaling, seed=args.seed)
    if args.task == "multiclass":
        return ss.MulticlassSSVM(learner=learner, n_features=args.n_features)
    if args.task == "multilabel":
        return ss.MultiLabelSSVM(learner=learner, n_features=args.n_features, hierarchy=hierarchy,
                                 pairwise=args.learner == "gdmm")
    return ss.SequenceTagger(learner=learner, n_features=args.n_features, loss=args.loss)


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


def open_sink(uri):
    from streamssvm.connectors.base import JSONLSink
    if uri.startswith("kafka://"):
        from streamssvm.connectors.kafka import KafkaSink, parse_kafka_uri
        d = parse_kafka_uri(uri)
        return KafkaSink(d["bootstrap"], d["topic"])
    return JSONLSink(uri[len("file://"):] if uri.startswith("file://") else uri)


TASK_OF = {"MulticlassSSVM": "multiclass", "MultiLabelSSVM": "multilabel", "SequenceTagger": "sequence",
            "ExtremeClassifier": "extreme"}


LEARNER_KEYS = ("task", "hierarchy", "learner", "search", "eps", "max_queries", "mips", "variant", "batch", "rows",
                 "max_dirty", "ef", "lam", "replay", "sampling", "step", "cache", "rescaling", "capacity",
                 "eviction", "n_features", "seed", "loss")


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
    return {k: getattr(args, k, None) for k in LEARNER_KEYS}


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


def open_file_or_kafka(args, dead):
    """The source of ``run`` / ``predict``, with ``dead`` as its dead-letter sink; ``--task
    multilabel`` implies multi-label parsing of libsvm files. Returns (source, file format or
    None for Kafka)."""
    if args.source.startswith("kafka://"):
        from streamssvm.connectors.kafka import open_kafka
        return open_kafka(args.source, dead_letter=dead), None
    from streamssvm.connectors.files import detect_format, open_source, parse_file_uri
    path, opts = parse_file_uri(args.source)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path}")
    fmt = detect_format(path, opts.get("format"))
    kw = {"dead_letter": dead, "format": fmt}
    if getattr(args, "task", None) == "multilabel" and fmt == "libsvm" and "multilabel" not in opts:
        kw["multilabel"] = True
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
