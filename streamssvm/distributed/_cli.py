"""``streamssvm run --workers N --cluster ...`` and ``streamssvm report`` for distributed jobs."""
from __future__ import annotations

import json
from pathlib import Path


def parse_labels(text):
    """``"a,b,3"`` -> ``["a", "b", 3]`` (each item read as JSON when it parses, else as a string).

    >>> parse_labels("a, b,3")
    ['a', 'b', 3]
    """
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(json.loads(item))
        except ValueError:
            out.append(item)
    return out


def distributed_model(model, labels):
    """The CLI's model made fit for distributed learning: labels declared. BCFW keeps the single
    run's configuration (averaging at the mixer, gap sampling with its own full gap passes, FIFO
    windows per worker; see :mod:`._bcfw`)."""
    return model.clone({"labels": labels})


#: ``run --workers`` without ``--n-features`` on dict features: hashed into this many buckets
HASH_BUCKETS = 2 ** 18


def _label_items(y):
    """The labels one record's ``y`` names (a label, a list of them, a ``{label: bool}`` dict)."""
    if isinstance(y, dict):
        return list(y)
    if isinstance(y, (list, tuple)):
        return list(y)
    return [] if y is None else [y]


def scan_file(args):
    """One pass over a file source: ``(labels in order of first appearance, dict features?)``;
    None for a Kafka source (a topic cannot be read ahead)."""
    if args.source.startswith("kafka://"):
        return None
    from ..connectors.base import DeadLetterSink
    from ..connectors.files import detect_format, open_source, parse_file_uri
    path, opts = parse_file_uri(args.source)
    fmt = detect_format(path, opts.get("format"))
    kw = {"multilabel": True} if args.task == "multilabel" and fmt in ("libsvm", "csv") and \
        "multilabel" not in opts else {}
    src = open_source(args.source, dead_letter=DeadLetterSink(), format=fmt, **kw)
    src.dead_letter.warn = False
    seen, dict_x = {}, False
    try:
        for rec in src:
            dict_x = dict_x or isinstance(rec.x, dict) or (isinstance(rec.x, list) and rec.x
                                                           and isinstance(rec.x[0], dict))
            for lab in _label_items(rec.y):
                seen.setdefault(lab, None)
    finally:
        src.close()
    return list(seen), dict_x


def match_spelling(declared, found):
    """Declared labels in the records' own spelling: ``--labels 0,1`` reads as the numbers 0 and
    1; records whose ``y`` is the string ``"1"`` name the same label (matched by its text).

    >>> match_spelling([0, 1, "b"], ["1", "0", "b"])
    ['0', '1', 'b']
    """
    by_text = {str(v): v for v in found}
    return [v if v in found else by_text.get(str(v), v) for v in declared]


def run_from_args(args, model):
    """Run the CLI's ``run`` command on a Ray cluster; returns the process exit code. A file
    source is read once ahead: without ``--labels`` its labels are declared from the data, with
    ``--labels`` they take the records' spelling; dict features without ``--n-features`` are
    hashed (:data:`HASH_BUCKETS`), so that every worker indexes labels and features alike."""
    import sys

    from . import run
    scan = scan_file(args)
    if not args.labels and scan is None:
        raise SystemExit("error: --workers on a Kafka topic needs --labels a,b,c (every worker must number the "
                         "labels alike, and a topic cannot be read ahead for them)")
    labels = parse_labels(args.labels) if args.labels else scan[0]
    if scan is not None:
        labels = match_spelling(labels, scan[0])
        if not args.labels:
            shown = ",".join(map(str, labels[:10])) + (",..." if len(labels) > 10 else "")
            print(f"note: --workers: {len(labels)} labels read from {args.source} ({shown}); --labels declares "
                  f"them instead", file=sys.stderr)
    if args.n_features is None and (scan is None or scan[1]):
        model = model.clone({"n_features": HASH_BUCKETS})
        print(f"note: --workers: dict features are hashed into {HASH_BUCKETS:,} buckets so that every worker "
              f"indexes them alike (--n-features chooses the number)", file=sys.stderr)
    if getattr(model, "scale", False):
        model = model.clone({"scale": False})
        args.scale = False
        print("note: --workers: feature scaling is off (the workers would each learn their own statistics); "
              "scale the features ahead if they differ in scale", file=sys.stderr)
    if getattr(model, "normalize", False):
        model = model.clone({"normalize": False})
        print("note: --workers: multi-label row normalization is off (the workers would each learn their own "
              "mean row norm)", file=sys.stderr)
    model = distributed_model(model, labels)
    res = run(model, args.source, task=args.task, workers=args.workers, cluster=args.cluster,
              checkpoint_dir=args.checkpoint_dir, round_examples=args.round_examples,
              round_seconds=args.round_seconds, passes=args.refine_passes, idle_timeout=args.idle_timeout,
              metrics_path=args.metrics, keep=args.keep, progress=not args.no_progress,
              dead_letter=args.dead_letter, max_bad_fraction=args.max_bad_fraction)
    if args.save:
        import sys
        path = res.model.save(args.save)
        print(f"saved the model ({type(res.model).__name__}, {res.model.n_blocks} examples held) to {path}",
              file=sys.stderr)
    summary = summarize(res.history, res.certificate)
    summary["restarts"] = res.restarts
    summary["stopped"] = res.stopped
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    bad, total = res.bad_records, res.bad_records + res.examples_seen
    if bad and (res.stopped == "too many bad records"
                or (args.max_bad_fraction is not None and bad > args.max_bad_fraction * total)):
        where = f"sent to {args.dead_letter}" if args.dead_letter else "counted only; --dead-letter FILE keeps them"
        import sys
        print(f"error: {bad:,} of {total:,} records were bad ({where})", file=sys.stderr)
        return 1
    return 0


def summarize(history, certificate=None):
    last = history[-1] if history else {}
    c = certificate or next((h["certificate"] for h in reversed(history) if "certificate" in h), None)
    return {"rounds": last.get("round", 0), "examples_seen": last.get("examples_seen", 0),
            "bad_records": last.get("bad_records", 0),
            "n_blocks": last.get("n_blocks", 0), "metrics": last.get("metrics", {}),
            "workers": [{"worker": w["worker"], "examples_seen": w["examples_seen"], "n_blocks": w["n_blocks"],
                         "throughput": w["throughput"], "learn_cpu": w["learn_cpu"]}
                        for w in last.get("workers", [])],
            "bytes_per_round": (sum(h["bytes_up"] + h["bytes_down"] for h in history) / len(history)
                                if history else 0),
            "global_certificate": c}


def print_summary(s):
    print(f"rounds {s['rounds']} | examples seen {s['examples_seen']} | blocks {s['n_blocks']} | "
          f"{s['bytes_per_round']:,.0f} bytes per round")
    print(f"progressive metrics: {json.dumps(s['metrics'])}")
    if s.get("bad_records"):
        print(f"bad records: {s['bad_records']:,}")
    for w in s["workers"]:
        print(f"  worker {w['worker']}: {w['examples_seen']} examples, {w['n_blocks']} blocks, "
              f"{w['throughput']:,.0f} ex/s, learn CPU {w['learn_cpu']:.1f}s")
    c = s["global_certificate"]
    if c:
        print(f"global certificate: gap {c['gap']:.6g}  primal {c['primal']:.6g}  dual {c['dual']:.6g}  "
              f"blocks {c['n_blocks']}  exact {c['exact']}")
    if s.get("restarts"):
        print(f"restarts from a cut: {s['restarts']}")


def is_distributed_dir(path):
    return (Path(path) / "cuts").is_dir()


def report(path, as_json=False):
    """Summary of a distributed job's checkpoint directory (newest valid cut)."""
    from ._cut import CutStore
    got = CutStore(path).latest()
    if got is None:
        raise SystemExit(f"error: no valid cut in {path}")
    st, cut_path = got
    s = summarize(st["mixer"]["history"])
    s["cut"] = str(cut_path)
    if as_json:
        print(json.dumps(s, indent=2, default=str))
    else:
        print(f"cut               {cut_path}")
        print_summary(s)
    return 0
