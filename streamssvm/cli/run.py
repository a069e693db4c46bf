"""``streamssvm run``: learn from a source (a file or a Kafka topic) with checkpoints, snapshots and
dead letters; ``--workers`` hands over to :mod:`streamssvm.distributed`."""
from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time

from .options import (
    CliDeadLetters, Refused, certificate_text, likely_cause, make_model, open_file_or_kafka,
    open_sink, read_test, run_settings, say_saved, strict_json, graceful_signals)
from .warmup import warm_model, warm_kernels


def _check_settings(eng, args):
    """A resumed run must use the checkpoint's settings, unless --reset (start over) or
    --override (resume anyway: the model keeps the checkpoint's settings)."""
    old, new = eng.restored_settings, eng.settings
    if old is None or old == new or (set(new) - set(old) == {"scale"} and old == {k: new[k] for k in old}):
        return
    # a checkpoint from before --scale existed holds no "scale": its model keeps its own (off)
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and (k != "scale" or k in old))
    what = ", ".join(f"--{k.replace('_', '-')} {old.get(k)!r} (now {new.get(k)!r})" for k in diff)
    if not args.override:
        raise Refused(f"the checkpoint {eng.resumed_from} was made with {what}; run with --reset to start "
                       f"over, or --override to resume it anyway (it keeps its own settings)")
    print(f"warning: --override: resuming {eng.resumed_from}, whose model keeps its settings: {what}",
          file=sys.stderr)
    eng.settings = old


def _reset_checkpoints(directory):
    """--reset: remove the checkpoints of ``directory`` (only its ``ckpt-*`` entries)."""
    import shutil

    from ..checkpoint import CheckpointManager
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
            from ..distributed._cli import run_from_args
        except ImportError as e:   # Ray missing: the message names pip install 'streamssvm[distributed]'
            raise SystemExit(f"error: --workers: {e}") from None
        return run_from_args(args, make_model(args))
    from ..checkpoint import CheckpointManager
    from ..engine import Engine
    ckpt = None
    if args.checkpoint_dir:   # first: the lock (another run: exit 3) and the pre-flight write check
        ckpt = CheckpointManager(args.checkpoint_dir, keep=args.keep)
        ckpt.acquire()
    dead = CliDeadLetters.make(args.dead_letter)
    source, fmt = open_file_or_kafka(args, dead)
    if fmt is not None and os.path.getsize(source.path) == 0:
        source.close()
        print(f"error: {source.path} is empty: no records to learn from", file=sys.stderr)
        return 1
    if args.model:
        import streamssvm as ss
        model = ss.load(args.model)
        got = model.task
        if got != args.task:
            raise ValueError(f"--model {args.model} is a {type(model).__name__} (--task {got}), not --task {args.task}")
        make = lambda: ss.load(args.model)  # noqa: E731
    else:
        model = make_model(args)
        make = lambda: make_model(args)  # noqa: E731
    eng = Engine(model, source, task=args.task, snapshot_every=args.snapshot_every,
                 checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                 keep=args.keep, metrics_path=args.metrics, dead_letter=dead,
                 max_examples=args.max_examples, idle_timeout=args.idle_timeout,
                 progress=not args.no_progress, refine_at_end=args.refine_passes,
                 rate=args.rate,
                 batch_size=args.batch_size, test=read_test(args.test, args.task))
    if ckpt is not None:
        eng.ckpt = ckpt   # the locked one
    sink = eng.sink = open_sink(args.sink) if args.sink else None
    if args.reset and args.checkpoint_dir:
        n = _reset_checkpoints(args.checkpoint_dir)
        if n:
            print(f"--reset: removed {n} checkpoint(s) in {args.checkpoint_dir}", file=sys.stderr)
    if sink is not None and hasattr(sink, "on_closed"):   # the reader of --sink closed its pipe
        sink.on_closed = lambda: eng.request_stop(signal.SIGPIPE)
    eng.settings = run_settings(args)
    eng.max_bad_fraction = args.max_bad_fraction
    if args.refine_passes and not args.no_progress:
        eng.refine_progress = _RefineProgress(eng, args.refine_passes)
    try:
        with graceful_signals(eng.request_stop):
            if eng.restore():
                print(f"resuming from {eng.resumed_from} ({eng.examples_seen:,} examples)", file=sys.stderr, flush=True)
                _check_settings(eng, args)
            bad0 = eng.bad_records
            warm_kernels(lambda: warm_model(make, args.task, args.source, fmt))
            summary = eng.run()
    finally:
        source.close()
        if sink is not None:
            sink.close()
        dead.close()
    if args.save:
        say_saved(eng.model.save(args.save), eng.model)
    src_bad = source.n_bad
    summary["bad_records_at_source"] = src_bad
    bad_run = eng.bad_records - bad0 + src_bad
    total_run = summary["new_examples"] + bad_run
    where = (f"sent to the dead-letter sink {args.dead_letter}" if args.dead_letter
             else "counted only; --dead-letter FILE keeps them")
    out = sys.stderr if args.sink in ("-", "file://-", "/dev/stdout") else sys.stdout   # stdout: predictions
    if args.json:
        print(json.dumps(strict_json(summary), indent=2, default=str, allow_nan=False), file=out)
    else:
        c = summary["last_certificate"] or {}
        print(f"examples seen {summary['examples_seen']:,} ({summary['new_examples']:,} new, "
              f"{summary['throughput']:,.0f} ex/s); stopped: {summary['stopped']}", file=out)
        print(f"progressive metrics: {json.dumps(strict_json(summary['metrics']))}", file=out)
        if summary.get("test"):
            print(f"test metrics ({args.test}): {json.dumps(strict_json(summary['test']))}", file=out)
        if c:
            print(f"certificate: {certificate_text(c)}", file=out)
        nbad = summary.get("n_bad", summary["bad_records"] + src_bad)
        if nbad:
            print(f"bad records: {nbad:,} ({where})", file=out)
    if summary["stopped"] == "idle timeout" and source.fault:
        print(f"error: stopped after --idle-timeout {args.idle_timeout:g}s: {source.fault}; the checkpoint keeps "
              f"the position, run the same command to resume", file=sys.stderr)
        return 3
    if summary["stopped"] == "interrupted" and eng.stop_signal == signal.SIGPIPE:
        saved = f"; checkpoint written in {args.checkpoint_dir}" if args.checkpoint_dir else ""
        print(f"stopped after {eng.examples_seen:,} examples: the reader of --sink {args.sink} closed it{saved}",
              file=sys.stderr)
        return 0
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
              f"{likely_cause(args, fmt, dead)}", file=sys.stderr)
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
