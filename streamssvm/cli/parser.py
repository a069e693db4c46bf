"""The argument parser of every command, and :func:`main`."""
from __future__ import annotations

import argparse
import sys

from .broker import cmd_broker, cmd_produce
from .datasets import cmd_datasets
from .demo import cmd_demo
from .export import cmd_export
from .inspect import add_inspect_parser
from .options import HelpFormatter, Refused, add_learner_args, param_option
from .path import add_path_args, cmd_path
from .predict import cmd_predict
from .report import cmd_report
from .run import cmd_run
from .warmup import _early_notice, _say_compiling_early


def _run_source_help():
    from streamssvm.connectors.files import SOURCE_OPTIONS
    return (SOURCE_OPTIONS + "\n\nkafka sources: kafka://HOST:PORT/TOPIC?group=G[&partitions=0,1][&stop_at_end=1][&weight_field=NAME]\n\n"
            "exit status: 0 done; 1 no records, or more than --max-bad-fraction of them bad; 2 bad arguments or "
            "settings that differ from the checkpoint's; 3 a fault the run cannot go on with (the input changed under "
            "the checkpoint, a Kafka broker or topic gone, the checkpoint directory locked or not writable, a full "
            "disk); 130 / 143 stopped by SIGINT / SIGTERM (checkpoint "
            "written, run the same command to resume)")


def _positive_int(v):
    try:
        k = int(v)
    except ValueError:
        k = 0
    if k < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v!r}")
    return k


def build_parser():
    from .. import __version__
    from ..engine import Engine   # here: importing the CLI stays light (the compile notice comes first)
    fmt = {"formatter_class": HelpFormatter}
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
    add_learner_args(r)
    r.add_argument("--checkpoint-dir", default=None, help="checkpoint here and resume from here (default: none)")
    param_option(r, Engine, "checkpoint_every")
    param_option(r, Engine, "keep")
    r.add_argument("--reset", action="store_true", help="delete the checkpoints in --checkpoint-dir and start over")
    r.add_argument("--override", action="store_true", help="resume a checkpoint made with other settings anyway "
                   "(its model keeps its own settings)")
    param_option(r, Engine, "snapshot_every")
    r.add_argument("--metrics", default=None, help="JSONL file receiving one line per snapshot")
    r.add_argument("--sink", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for predictions")
    r.add_argument("--dead-letter", default=None, help="JSONL file or kafka://HOST:PORT/TOPIC for bad records "
                   "(default None: bad records are only counted)")
    r.add_argument("--max-bad-fraction", type=float, default=0.5,
                   help="fail (exit 1) when more than this fraction of the records are bad (checked from the "
                        "100th record on and at the end)")
    param_option(r, Engine, "max_examples")
    r.add_argument("--test", default=None, help="file://... held-out examples scored at each snapshot (key 'test'; "
                   "default None)")
    param_option(r, Engine, "idle_timeout")
    r.add_argument("--on-offset-reset", choices=["fail", "earliest", "latest"], default="fail",
                   help="kafka: when a partition's log restarted below the checkpointed offset (topic recreated, "
                        "broker emptied): fail (exit 3), or read the new log from its earliest or latest offset "
                        "(default: fail)")
    param_option(r, Engine, "rate")
    param_option(r, Engine, "batch_size")
    param_option(r, Engine, "refine_at_end", flag="--refine-passes")
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
    pd.add_argument("--nbest", type=_positive_int, default=None, metavar="K",
                    help="also write the K best outputs of each record, best first, as \"nbest\": "
                    "[{\"output\": ..., \"score\": ...}, ...] (default None: the prediction only)")
    pd.add_argument("--proba", action="store_true", help="add each prediction's probabilities (predict_proba_one: "
                    "classes, labels, or per-token marginals at the model's fitted temperature) as \"proba\"")
    pd.set_defaults(func=cmd_predict)
    add_inspect_parser(sub, fmt)

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
    pa = sub.add_parser("path", help="the eps-approximate regularization path of a file's examples (BCFW), scored "
                        "on --test", **fmt)
    pa.add_argument("--source", required=True, help="file://PATH[?OPTION=...]: the training examples (held whole)")
    pa.add_argument("--task", required=True, choices=["multiclass", "multilabel", "sequence"],
                    help="what a record's label is: one class, a set of labels, a tag sequence")
    pa.add_argument("--test", default=None, help="file://... validation examples scored at every breakpoint")
    pa.add_argument("--hierarchy", default=None, help="multilabel: JSON file {child: parent} (as for run)")
    add_path_args(pa)
    pa.add_argument("--plot", default=None, help="write a PNG of gap, primal and validation score against lambda")
    pa.add_argument("--save", default=None, help="save the model at the best validation lambda (without --test: "
                    "the smallest breakpoint) to this file")
    pa.add_argument("--json", action="store_true", help="print the path as JSON")
    pa.set_defaults(func=cmd_path)

    ds = sub.add_parser("datasets", help="list or fetch the downloadable datasets (Brown corpus)", **fmt)
    ds.add_argument("action", choices=["list", "fetch"], help="list: what is where; fetch: download")
    ds.add_argument("name", nargs="?", default=None, help="dataset to fetch (brown)")
    ds.add_argument("--dest", default=None, help="directory (default None: the user cache)")
    ds.set_defaults(func=cmd_datasets)
    return p


def _os_error_text(e):
    """One line for a disk fault: what failed, on which file, and the likely cause."""
    import errno
    where = f" ({e.filename})" if getattr(e, "filename", None) else ""
    what = e.strerror or str(e)
    hint = {errno.ENOSPC: "the disk is full: free space, then run the same command to resume",
            errno.EDQUOT: "the disk quota is exhausted: free space, then run the same command to resume",
            errno.EROFS: "the file system is read-only", errno.EACCES: "no permission to write there",
            errno.EPERM: "no permission to write there"}.get(e.errno)
    return f"{what}{where}" + (f": {hint}" if hint else "")


def _compiles_kernels(argv):
    """Whether the command line ``argv`` runs a command that compiles the kernels (``run``,
    ``demo``; not their ``--help``, not ``run --workers``), judged without building the parser
    (which imports the connectors, and numpy with them)."""
    a = sys.argv[1:] if argv is None else [str(v) for v in argv]
    return bool(a) and a[0] in ("run", "demo", "path") and not any(
        v in ("-h", "--help") or v == "--workers" or v.startswith("--workers=") for v in a)


def _refuse_unknown(parser, args, extra):
    """Unrecognized options: argparse's error from the command's own parser, naming the closest
    option of that command for each (``--lamda`` -> ``--lam``)."""
    import difflib
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    known = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for a in extra:
        if a.startswith("-"):
            close = difflib.get_close_matches(a.split("=", 1)[0], known, n=1, cutoff=0.6)
            if close:
                hints.append(f"{a.split('=', 1)[0]} -> {close[0]}")
    msg = "unrecognized arguments: " + " ".join(extra)
    if hints:
        msg += "; did you mean: " + ", ".join(hints) + "?"
    sub.error(msg)


def main(argv=None):
    if _compiles_kernels(argv):
        _say_compiling_early()   # before the first heavy import (numpy, numba, the kernels)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _refuse_unknown(parser, args, extra)
    from ..errors import CheckpointError, RunFault, SourceFault
    try:
        return args.func(args)
    except (SourceFault, RunFault) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except OSError as e:
        if isinstance(e, (FileNotFoundError, IsADirectoryError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"error: {_os_error_text(e)}", file=sys.stderr)
        return 3
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, CheckpointError, Refused) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _early_notice["t0"] = None
