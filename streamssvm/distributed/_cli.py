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
    """The CLI's model made fit for distributed learning: labels declared; BCFW without
    averaging and without its own refreshing full passes (see :mod:`._bcfw`)."""
    params = {"labels": labels}
    lr = model.learner
    if lr.mixing == "dual":
        params["learner"] = lr.clone({"averaging": False, "gap_every": None})
    return model.clone(params)


def run_from_args(args, model):
    """Run the CLI's ``run`` command on a Ray cluster; returns the process exit code."""
    from . import run
    if not args.labels:
        raise SystemExit("error: --workers needs --labels a,b,c (every worker must number the labels alike)")
    model = distributed_model(model, parse_labels(args.labels))
    res = run(model, args.source, task=args.task, workers=args.workers, cluster=args.cluster,
              checkpoint_dir=args.checkpoint_dir, round_examples=args.round_examples,
              round_seconds=args.round_seconds, passes=args.refine_passes, idle_timeout=args.idle_timeout,
              metrics_path=args.metrics, keep=args.keep, progress=not args.no_progress)
    if args.save:
        import sys
        path = res.model.save(args.save)
        print(f"saved the model ({type(res.model).__name__}, {res.model.n_blocks} examples held) to {path}",
              file=sys.stderr)
    summary = summarize(res.history, res.certificate)
    summary["restarts"] = res.restarts
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    return 0


def summarize(history, certificate=None):
    last = history[-1] if history else {}
    c = certificate or next((h["certificate"] for h in reversed(history) if "certificate" in h), None)
    return {"rounds": last.get("round", 0), "examples_seen": last.get("examples_seen", 0),
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
