"""``streamssvm report``: the snapshot history and the last certificate of a checkpoint directory
(text, ``--json`` or ``--plot``)."""
from __future__ import annotations

import json
import os
import sys

from .options import certificate_text, strict_json
from .plotting import plot_history


def _load_history(ckpt_dir):
    from ..checkpoint import CheckpointManager
    got = CheckpointManager(ckpt_dir).latest()
    if got is None:
        raise SystemExit(f"error: no valid checkpoint in {ckpt_dir}")
    state, meta, path = got
    return state["engine"], meta, path


def cmd_report(args):
    if os.path.isdir(os.path.join(args.checkpoint_dir, "cuts")):   # a distributed job's directory
        from ..distributed._cli import report
        return report(args.checkpoint_dir, as_json=args.json)
    eng, meta, path = _load_history(args.checkpoint_dir)
    summary = {"checkpoint": str(path), "examples_seen": eng["examples_seen"],
               "bad_records": eng["bad_records"], "n_bad": eng.get("n_bad", eng["bad_records"]), "task": eng.get("task"),
               "source_position": eng["position"], "last_certificate": eng["last_certificate"],
               "metrics": meta.get("metrics"), "snapshots": len(eng["history"]),
               "test": next((h["test"] for h in reversed(eng["history"]) if "test" in h), None)}
    if args.plot:
        if not eng["history"]:
            print("warning: no snapshots recorded; nothing to plot", file=sys.stderr)
        else:
            plot_history(eng["history"], args.plot, title=f"streamssvm report: {os.path.basename(str(path))}")
            summary["plot"] = args.plot
    if args.json:
        print(json.dumps(strict_json(summary), indent=2, default=str, allow_nan=False))
    else:
        c = summary["last_certificate"] or {}
        print(f"checkpoint        {summary['checkpoint']}")
        print(f"examples seen     {summary['examples_seen']}")
        print(f"bad records       {summary['bad_records']}")
        print(f"source position   {json.dumps(summary['source_position'])}")
        print(f"metrics           {json.dumps(summary['metrics'])}")
        if summary["test"]:
            print(f"test metrics      {json.dumps(strict_json(summary['test']))}")
        if c:
            print(f"last certificate  {certificate_text(c)}  exact {c.get('exact')}")
        if args.plot and eng["history"]:
            print(f"plot              {args.plot}")
    return 0
