"""The stream loop.

    source -> predict (progressive validation, sink) -> learn -> snapshot -> checkpoint

* Every record is first predicted (the prediction goes to the sink and the progressive
  metrics), then learned.
* A record the model cannot take (malformed, wrong shape, NaN/inf, ...) never stops the
  stream and is never dropped silently: it goes to the dead-letter sink with its reason.
* Every ``snapshot_every`` examples an exact full-gap certificate is computed and a line is
  appended to the metrics log (examples seen, gap, primal, dual, accuracy, throughput).
* Every ``checkpoint_every`` examples (and at the end) the model, the metrics, the snapshot
  history and the *source position* are checkpointed atomically; on start the newest valid
  checkpoint is restored and the source seeks to its position, so after a crash every
  example is reflected in the model exactly once.

>>> import numpy as np, streamssvm as ss
>>> from streamssvm.connectors.files import write_jsonl, open_source
>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> rng = np.random.default_rng(0)
>>> recs = [{"x": {"f": float(c) + 0.1 * rng.normal()}, "y": int(c)} for c in rng.integers(0, 3, 300)]
>>> _ = write_jsonl(os.path.join(d, "s.jsonl"), recs)
>>> eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=0.01, replay=2, seed=0)),
...              open_source(os.path.join(d, "s.jsonl")), task="multiclass",
...              snapshot_every=100, checkpoint_dir=os.path.join(d, "ckpt"), progress=False)
>>> summary = eng.run()
>>> summary["examples_seen"], summary["last_certificate"]["raw_gap"] > -1e-9
(300, True)
"""
from __future__ import annotations

import copy
import json
import os
import sys
import time

import numpy as np

from .checkpoint import CheckpointManager
from .connectors.base import DictRecords, RecordRows, Source, append_line, chunks
from .run_state import parse_run_state, run_state
from .step import TASKS, jsonable, predict_learn, reason_of, send_dead_letter
from .metrics import ProgressiveMetrics
from .params import Param

# the names this module gave them before :mod:`streamssvm.step` held them
_jsonable = jsonable

_CKPT_KIND = "streamssvm.engine"
_HISTORY_MAX = 10_000
_DICT, _PLAIN_LABELS = {dict}, {str, int}   # records the single-label conversion leaves as they are (_takes_plain)
_SOMEWHERE = object()   # a poisoned step not yet located (batched learning, or found at a checkpoint)
_NONFINITE = ("FloatingPointError: learning this record made the model's weights non-finite; the step "
              "was undone (the model was restored to its last checkpoint and the stream replayed without it)")
_CANNOT_UNDO = ("the weights became non-finite and the engine cannot go back to a restore point (the "
                "source cannot seek); stopped without saving the model")


def _pos_key(position):
    """A hashable key of a record's source position."""
    try:
        return json.dumps(_jsonable(position), sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(position)


def progress_metrics(m) -> str:
    """The progress line's metrics for a task's ``ProgressiveMetrics.get()`` dict: micro-F1 and
    Hamming loss for multi-label (exact match is the wrong headline there), token accuracy for
    sequences, accuracy otherwise.

    >>> progress_metrics({"micro_f1": 0.81, "hamming_loss": 0.05, "exact_match": 0.17, "accuracy": 0.17})
    'micro-F1 0.8100 | Hamming loss 0.0500'
    >>> progress_metrics({"token_accuracy": 0.9, "sequence_accuracy": 0.5, "accuracy": 0.9})
    'token accuracy 0.9000'
    >>> progress_metrics(0.5)
    'accuracy 0.5000'
    """
    if not isinstance(m, dict):
        return f"accuracy {m:.4f}"
    if "micro_f1" in m:
        return f"micro-F1 {m['micro_f1']:.4f} | Hamming loss {m['hamming_loss']:.4f}"
    if "token_accuracy" in m:
        return f"token accuracy {m['token_accuracy']:.4f}"
    return f"accuracy {m.get('accuracy', 0.0):.4f}"


class Progress:
    """A one-line progress display on stderr (examples/s, running metrics, last gap)."""

    def __init__(self, enabled=True, total=None, stream=None, every=0.5):
        self.enabled = enabled
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every if self.tty else 5.0
        self.t0 = time.perf_counter()
        self.last = 0.0

    def update(self, seen, acc, gap, force=False, new_this_run=None):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self.last < self.every:
            return
        self.last = now
        el = max(now - self.t0, 1e-9)
        rate = (new_this_run if new_this_run is not None else seen) / el
        tot = f"/{self.total}" if self.total else ""
        g = "-" if gap is None else f"{gap:.4g}"
        line = f"examples {seen:,}{tot} | {rate:,.0f} ex/s | {progress_metrics(acc)} | gap {g} | {el:.1f}s"
        if self.tty:
            self.stream.write("\r" + line + " " * 4)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def finish(self, seen, acc, gap, new_this_run=None):
        """The last line, ended (before other messages, e.g. the refinement's); later updates
        are no-ops."""
        self.update(seen, acc, gap, force=True, new_this_run=new_this_run)
        self.close()
        self.enabled = False


class Engine:
    """Run a model over a source with snapshots, checkpoints and dead letters.

    Parameters
    ----------
    model
        A streamssvm estimator (``MulticlassSSVM``, ``MultiLabelSSVM``, ``SequenceTagger``,
        ``ExtremeClassifier``); a checkpoint restores it with ``streamssvm.estimators.from_state``.
    source
        A ``streamssvm.connectors.base.Source`` (records with resumable positions).
    task
        ``"multiclass"``, ``"multilabel"``, ``"sequence"`` or ``"extreme"``.
    snapshot_every
        Examples between two exact full-gap certificates (None: only at the end).
    checkpoint_dir, checkpoint_every, keep
        Where and how often to checkpoint (default every 10 snapshots' worth, or 10,000
        examples), and how many checkpoints to keep.
    metrics_path
        JSONL file receiving one line per snapshot.
    sink
        Optional ``Sink`` receiving ``{"key", "prediction", "examples_seen"}`` per record.
    dead_letter
        ``DeadLetterSink`` for bad records (default: the source's own, else an in-memory one
        that warns).
    max_examples
        Stop once the model has seen this many examples in total (resumed runs included).
    idle_timeout
        Stop after this many seconds without a record (live sources that yield ``None``
        while idle).
    rate
        Pace the stream at this many records per second (:class:`connectors.files.Pacer`).
    batch_size
        Multiclass only: predict then learn chunks of this many records (``predict_learn_many``)
        in the same loop as the unbatched path (None: record by record).
    """

    #: the keyword-only configuration of ``__init__`` (:mod:`streamssvm.params`): the docs and the
    #: command line read it; ``__init__`` keeps its own checks (and their messages)
    params = (
        Param("task", None, "choice", "what the model learns", choices=TASKS),
        Param("snapshot_every", None, "int", "examples between full-gap snapshots (none: one at the end)", low=1,
              none=True),
        Param("checkpoint_dir", None, "object", "where checkpoints go (none: in memory only)"),
        Param("checkpoint_every", None, "int", "examples between checkpoints (none: 10 snapshots' worth, or "
              "10000)", low=1, none=True),
        Param("keep", 3, "int", "checkpoints to keep", low=1),
        Param("metrics_path", None, "object", "JSONL file receiving one line per snapshot"),
        Param("sink", None, "object", "sink of the predictions", cli=False),
        Param("dead_letter", None, "object", "dead-letter sink (default: the source's own)", cli=False),
        Param("max_examples", None, "int", "stop after this many examples in total", low=1, none=True),
        Param("idle_timeout", None, "float", "seconds without records before stopping", low=0.0, none=True),
        Param("progress", True, "bool", "show a progress line on stderr"),
        Param("refine_at_end", 0.0, "float", "refinement passes at the end of the source", low=0.0),
        Param("on_snapshot", None, "object", "callable(record) after each snapshot", cli=False),
        Param("rate", None, "float", "replay pace in examples/s (none: as fast as possible)", low=0.0,
              low_open=True, none=True),
        Param("batch_size", None, "int", "multiclass: predict_many + learn_many per batch (Kafka: per poll, at "
              "most this many)", low=1, none=True),
        Param("test", None, "object", "held-out (x, y) pairs scored at each snapshot", cli=False),
    )

    # interactive runs (the CLI sets these after construction; see the section below)
    settings = None           # the run's settings, stored in checkpoints (``restored_settings`` on resume)
    restored_settings = None
    stop_signal = None        # set by request_stop(): the loop stops after the current record
    max_bad_fraction = None   # stop when more than this fraction of the records are bad ...
    bad_min_records = 100     # ... once this many records were read in this run
    refine_progress = None    # callable(fraction, learner) during refine_at_end
    _wid = None               # worker_id() without a checkpoint directory

    _cpu0 = None   # process CPU seconds when run() started (the summary's cpu_seconds)
    _cpu_stream = None   # process CPU seconds from run() until the stream stopped

    def __init__(self, model, source, *, task, snapshot_every=None, checkpoint_dir=None,
                 checkpoint_every=None, keep=3, metrics_path=None, sink=None, dead_letter=None,
                 max_examples=None, idle_timeout=None, progress=True, refine_at_end=0.0,
                 on_snapshot=None, rate=None, batch_size=None, test=None):
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if not isinstance(source, Source):
            raise TypeError(f"source must be a streamssvm.connectors.base.Source (IterableSource wraps any "
                            f"iterable of (x, y) pairs), got {type(source).__name__}")
        for name, v in (("snapshot_every", snapshot_every), ("checkpoint_every", checkpoint_every),
                        ("max_examples", max_examples)):
            if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {v!r}")
        self.model = model
        self.source = source
        self.task = task
        self.snapshot_every = snapshot_every
        self.checkpoint_every = checkpoint_every or (10 * snapshot_every if snapshot_every else 10_000)
        self.ckpt = CheckpointManager(checkpoint_dir, keep=keep) if checkpoint_dir else None
        self.metrics_path = metrics_path
        self.sink = sink
        if dead_letter is None:
            dead_letter = source.dead_letter
        if dead_letter is None:
            from .connectors.base import DeadLetterSink
            dead_letter = DeadLetterSink()
        self.dead_letter = dead_letter
        self.max_examples = max_examples
        self.idle_timeout = idle_timeout
        self.progress = progress
        self.refine_at_end = refine_at_end
        self.on_snapshot = on_snapshot
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        self.rate = rate
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        if batch_size is not None and task != "multiclass":
            raise ValueError("batched learning (batch_size) is available for the multiclass task")
        self.batch_size = batch_size
        self.test = None if test is None else [model.coerce_input(x, y) for x, y in test]  # held-out (x, y)
        self.metrics = ProgressiveMetrics(task)
        self.examples_seen = 0
        self.bad_records = 0
        self.bad_at_source = 0      # source-level rejections up to the last restore point
        self._src_bad0 = 0          # the source's own counter when that point was restored
        self._poison: dict = {}     # position key -> reason: records whose step was undone
        self._undo_point = None     # in-memory restore point (no checkpoint on disk yet)
        self._careful_until = -1    # examples_seen below which every step checks all weights
        self.undone = 0             # steps undone (weights made non-finite)
        self._undone_at: set = set()
        self.history: list = []
        self.last_certificate = None
        self.resumed_from = None
        self.position = None

    # ------------------------------------------------------------------ checkpoints
    def restore(self):
        """Load the newest valid checkpoint (if any) and seek the source to its position."""
        if self.ckpt is None:
            return False
        self.ckpt.acquire()   # one run per checkpoint directory (a second one stops with RunFault)
        got = self.ckpt.latest(restore=self._parse_state)
        if got is None:
            return False
        r, meta, path = got
        self._apply_restored(r)
        self.resumed_from = str(path)
        return True

    def _parse_state(self, state, meta=None, path=None):
        """A checkpoint's engine state parsed and its model rebuilt, the source sought to its
        position; everything that can fail is done here, before the engine changes (a checkpoint
        that reads but cannot be applied falls back to the previous one)."""
        parsed = parse_run_state(state, "engine")
        parsed.update(bad_at_source=int(parsed.get("bad_at_source", 0)), history=list(parsed["history"]),
                      last_certificate=parsed["last_certificate"], settings=parsed.get("settings"))
        if parsed["position"] is not None:
            self.source.seek(parsed["position"])
        return parsed

    def _apply_restored(self, r):
        self.model = r["model"]
        self.examples_seen = r["examples_seen"]
        self.bad_records = r["bad_records"]
        self.bad_at_source = r["bad_at_source"]
        self._src_bad0 = self.source.n_bad
        self.metrics = r["metrics"]
        self.history = r["history"]
        self.last_certificate = r["last_certificate"]
        self.position = r["position"]
        self.restored_settings = r.get("settings")

    def checkpoint(self, asynchronous_commit=False, source_position=False):
        """Write a checkpoint (model, metrics, source position); once it is durable, commit the
        position to sources that track commits (Kafka). Without a checkpoint directory the same
        state is kept in memory as the restore point of :meth:`_undo`."""
        if self.sink is not None and self.ckpt is not None:
            self.sink.flush()
        # dead letters are durable before the checkpoint that counts their records
        if self.ckpt is not None:
            self.dead_letter.sync()
        if source_position:
            # at the end of the source and between polls, everything the source has delivered
            # has been processed, including bad records it dead-lettered after the last good
            # one; mid-batch only the last processed record's own position is safe
            self.position = self.source.position()
        state = run_state(self.model, "engine", examples_seen=self.examples_seen, bad_records=self.bad_records,
                          metrics=self.metrics, position=_jsonable(self.position),
                          bad_at_source=self.n_bad_at_source, n_bad=self.n_bad,
                          history=self.history[-_HISTORY_MAX:], last_certificate=self.last_certificate,
                          task=self.task, settings=_jsonable(self.settings))
        if self.ckpt is None:
            self._undo_point = copy.deepcopy(state)
            return None
        self.ckpt.acquire()
        meta = {"examples_seen": self.examples_seen, "position": _jsonable(self.position),
                "task": self.task, "estimator": type(self.model).__name__,
                "last_certificate": self.last_certificate, "metrics": self.metrics.get(),
                "bad_records": self.bad_records, "n_bad": self.n_bad}
        path = self.ckpt.save(state, kind=_CKPT_KIND, meta=meta)
        self._undo_point = None   # the checkpoint on disk is the restore point now
        if self.position is not None:
            self.source.commit(self.position, asynchronous=asynchronous_commit)
        return path

    # ------------------------------------------------------------------ bad records
    @property
    def n_bad_at_source(self):
        """Records the source itself rejected (unparsable, too long, ...), resumed runs included."""
        return self.bad_at_source + self.source.n_bad - self._src_bad0

    @property
    def n_bad(self):
        """Every record sent to the dead letters: by the source and by the engine (stored in
        checkpoints; ``streamssvm report --json`` shows it)."""
        return self.bad_records + self.n_bad_at_source

    def _weights_finite(self, full):
        """Whether the model's weights are finite: all of them (``full``), else the rows of the
        last learned record and the label-pair / bias weights (the rows a step on it changes)."""
        return self.model.weights_finite(full=full)

    def _undo(self, rec, reason, span=0):
        """Undo the step that made the weights non-finite: restore the last checkpoint (on
        disk, else the in-memory restore point taken at the run's start and at every
        checkpoint), seek the source there and replay; the poisoned record is skipped on the
        replay and dead-lettered then. The model is then exactly as if the record never came
        (the learners are deterministic given their state: a resumed run is bit-identical to an
        uninterrupted one). Records between the restore point and the poisoned one are learned
        again: their predictions reach the sink twice and the source's own dead letters may be
        sent twice (at least once, as after a crash); every count comes from the restore point.
        Returns False when there is nothing to go back to (the source cannot seek)."""
        seen = self.examples_seen
        if rec is not _SOMEWHERE:
            self._poison[_pos_key(rec.position)] = reason
        elif seen in self._undone_at:
            return False   # the careful replay did not find the record: no loop
        self._undone_at.add(seen)
        if self._undo_point is not None:
            try:
                r = self._parse_state(copy.deepcopy(self._undo_point))
            except Exception:  # noqa: BLE001 - a source that cannot seek
                return False
            self._apply_restored(r)
        elif self.ckpt is None or not self.restore():
            return False
        self.undone += 1
        # replay with the full check until past the point of detection (a poisoned checkpoint
        # interval found by the full check is located record by record)
        self._careful_until = max(self._careful_until, seen + span + 1)
        return True

    def worker_id(self):
        """A stable identity for this worker's checkpoint directory (stored in it)."""
        if self.ckpt is None:
            if self._wid is None:
                import uuid
                self._wid = uuid.uuid4().hex
            return self._wid
        import uuid
        d = self.ckpt.directory
        d.mkdir(parents=True, exist_ok=True)
        f = d / "worker_id"
        if not f.exists():
            tmp = d / f".worker_id.{uuid.uuid4().hex}"
            tmp.write_text(uuid.uuid4().hex)
            os.replace(tmp, f)
        return f.read_text().strip()

    def _on_revoke(self, partitions):
        """Partitions are about to move to another worker: checkpoint (and commit) first. This
        runs inside the Kafka client's rebalance callback, whose event loop is running, so the
        commit is sent asynchronously (ahead of the group re-join)."""
        self.checkpoint(asynchronous_commit=True, source_position=True)

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, t_start, seen_at_start):
        c = self.model.certificate()
        el = time.perf_counter() - t_start
        rec = {"examples_seen": self.examples_seen, "time": time.time(), "elapsed": el,
               "throughput": (self.examples_seen - seen_at_start) / max(el, 1e-9),
               "gap": c.gap, "primal": c.primal, "dual": c.dual, "n_blocks": c.n_blocks,
               "exact": c.exact, "certificate_seconds": c.seconds, "bad_records": self.bad_records,
               **self.metrics.get()}
        if c.extra:  # learner diagnostics (e.g. MEMOIR: index recall, margin error, staleness)
            rec["diagnostics"] = c.extra
        if getattr(self, "_refined", False):   # after refine_at_end: the plot's refinement column
            rec["phase"], rec["passes"] = "refine", self.refine_at_end
        if self.test:  # held-out metrics of the current model (nothing learned from them)
            held = ProgressiveMetrics(self.task)
            xs = [x for x, _ in self.test]
            preds = self.model.predict_many(xs) if self.task == "sequence" \
                else [self.model.predict_one(x) for x in xs]
            for (_, y), p in zip(self.test, preds):
                held.update(y, p)
            rec["test"] = held.get()
        rec = _jsonable(rec)
        self.last_certificate = _jsonable(c.to_dict())
        self.history.append(rec)
        if self.metrics_path:
            append_line(self.metrics_path, json.dumps(rec))   # whole lines; a torn tail cut on resume
        if self.on_snapshot:
            self.on_snapshot(rec)
        return rec

    # ------------------------------------------------------------------ loop
    #: unbatched runs: records per micro-batch when the model predicts and learns runs of
    #: records in one kernel call (``learns_in_runs``; bit-identical to record by record). A
    #: micro-batch ends at every snapshot and checkpoint boundary, at ``max_examples`` and where
    #: the source's ``stream()`` breaks (Kafka: the end of a poll); a paced run (``rate``) and a
    #: model without runs go record by record. 1024: the per-batch Python side (the reader's
    #: arrays, the block reservations, the calibration window, the engine's bookkeeping) is
    #: paid once per 1024 records (``Engine.run`` on 20k OCR letters from a JSONL file: a median
    #: 24.1 against 24.9 CPU us per record at 256 over 8 paired runs on a loaded machine, the
    #: same predictions and weights); 4096 was slower in the library's own loop
    MICRO_BATCH = 1024

    def _chunks(self):
        """Lists of records (``None`` while a live source is idle): the source's own polls when
        batching and the source has them (Kafka), else ``batch_size`` records; unbatched,
        micro-batches (:attr:`MICRO_BATCH`) or single records."""
        if self.batch_size:
            return self.source.batches(self.batch_size)
        if self.MICRO_BATCH > 1 and self.rate is None and self.model.learns_in_runs:
            return self._micro_chunks()
        return chunks(self.source, 1)

    def _room(self):
        """Records the next micro-batch may hold: up to the next snapshot / checkpoint boundary
        and ``max_examples`` (bad records count none, so a batch never crosses one)."""
        k, seen = self.MICRO_BATCH, self.examples_seen
        if self.snapshot_every:
            k = min(k, self.snapshot_every - seen % self.snapshot_every)
        k = min(k, self.checkpoint_every - seen % self.checkpoint_every)
        if self.max_examples is not None:
            k = min(k, self.max_examples - seen)
        return max(k, 1)

    def _micro_chunks(self):
        """The source's micro-batches (:meth:`Source.micro_batches`): lists of consecutive
        records (or a :class:`RecordRows`), at most :meth:`_room` each, asked when each is
        started; ``None`` while the source is idle."""
        return self.source.micro_batches(self._room)

    def _predict_learn(self, xs, ys, recs):
        """Progressive validation of a chunk: predictions made before learning. Batched, one
        ``predict_learn_many`` call (the batch is validated before anything is learned); a
        chunk it refuses, and every unbatched record, goes one record at a time, bad ones to
        the dead letters (:meth:`_learn_record`). Returns the records learned as three parallel
        sequences (labels, predictions, records) and the record whose step made the weights
        non-finite (None if none)."""
        rows = type(recs) is RecordRows
        unit = rows or all(type(r.w) is float and r.w == 1.0 for r in recs)
        if not self.batch_size and len(xs) > 1 and not self._careful() and self.model.learns_in_runs \
                and not (self._poison and any(_pos_key(r.position) in self._poison for r in recs)):
            # unbatched micro-batch: runs of records through one kernel call each, the same
            # predictions and state as record by record; bad records are dead letters in place
            # records of weight other than 1 leave the kernel's runs (predict_learn_one with it)
            ws = None if unit else [r.w for r in recs]
            res = self.model.predict_learn_each(xs, ys, ws)
            if all(ok for ok, _ in res):
                done = (ys, [v for _, v in res], recs)
            else:
                kept = []
                for i, (ok, v) in enumerate(res):
                    if ok:
                        kept.append(i)
                    else:
                        self._bad(recs[i], reason_of(v))
                done = ([ys[i] for i in kept], [res[i][1] for i in kept], [recs[i] for i in kept])
            if not self._weights_finite(full=False):   # the rows of every learned record
                return done, _SOMEWHERE   # the careful replay locates the record, one at a time
            return done, None
        if rows:
            recs = list(recs)
        if self.batch_size and not self._careful() and unit:
            try:
                preds = self.model.predict_learn_many(xs, ys)
                if self._weights_finite(full=True):
                    return (ys, preds, recs), None
                return ([], [], []), _SOMEWHERE   # the replay locates the record, one at a time
            except (ValueError, TypeError, KeyError):
                pass
        done = ([], [], [])
        for x, y, rec in zip(xs, ys, recs):
            status, p = self._learn_record(x, y, rec)
            if status == "poisoned":
                return done, rec
            if status == "damaged":
                return done, _SOMEWHERE
            if status == "learned":
                done[0].append(y)
                done[1].append(p)
                done[2].append(rec)
        return done, None

    def _careful(self):
        return self.examples_seen < self._careful_until

    def _takes_rows(self):
        """Whether the model takes a :class:`RecordRows`' arrays as they are: a single-label
        task whose conversion of a record is the single-label one (it leaves a flat float64 row
        and a scalar label unchanged); its ``predict_learn_each`` then gets the 2-D array."""
        from .estimators.base import Estimator
        return self.task in ("multiclass", "extreme") and type(self.model).coerce_input is Estimator.coerce_input

    def _takes_plain(self, chunk):
        """Whether every record of ``chunk`` (a list) has a ``dict`` of features and a ``str`` /
        ``int`` label and the model's conversion of a record is the single-label one, which
        leaves such a record unchanged (:meth:`_takes_rows`)."""
        return (type(chunk) is list and set(type(r.x) for r in chunk) == _DICT
                and set(type(r.y) for r in chunk) <= _PLAIN_LABELS and self._takes_rows())

    def _learn_record(self, x, y, rec):
        """Predict then learn one record (:func:`streamssvm.step.predict_learn`). Any exception
        from it (ValueError, TypeError, OverflowError, RecursionError, MemoryError, ...) makes it
        a dead letter with its reason; the estimators validate the whole record before changing
        any state. Returns
        ("learned", prediction), ("bad", None) or ("poisoned", None) when the step made the
        weights non-finite (the caller undoes it, :meth:`_undo`)."""
        reason = self._poison.get(_pos_key(rec.position)) if self._poison else None
        if reason is not None:
            self._bad(rec, reason)
            return "bad", None
        out = predict_learn(self.model, x, y, w=rec.w)
        if out.bad:
            self._bad(rec, out.reason)
            return "bad", None
        careful = self._careful()
        if not self._weights_finite(full=careful):
            # careful (replaying with the full check after every record): this record's step
            # made the weights non-finite; otherwise the damage may predate it (a row this
            # record shares with an earlier one): the careful replay locates it
            return ("poisoned" if careful else "damaged"), None
        return "learned", out.prediction

    def _loop(self, t0, seen0, prog):
        """The stream loop: per chunk of records, pace, convert, predict then learn, count,
        then snapshot / checkpoint when the chunk crosses a multiple of ``snapshot_every`` /
        ``checkpoint_every`` examples seen (unbatched: exactly on the multiples, so a resumed
        run takes them at the same points as an uninterrupted one). Returns (reason stopped,
        examples since the last snapshot)."""
        since_snap = 0
        if self.max_examples is not None and self.examples_seen >= self.max_examples:
            return "max examples", since_snap
        pacer = None
        if self.rate is not None:
            from .connectors.files import Pacer
            pacer = Pacer(self.rate)
        last_record = time.monotonic()
        for chunk in self._chunks():
            if chunk is None:  # idle heartbeat from a live source
                if self.stop_signal is not None:
                    return "interrupted", since_snap
                if self.idle_timeout is not None and time.monotonic() - last_record >= self.idle_timeout:
                    self._idle_tail = time.monotonic() - last_record   # not the stream's time
                    return "idle timeout", since_snap
                continue
            last_record = time.monotonic()
            if self._lead_in is None:   # the wait for the first record (a consumer group's join): not the stream's time
                self._lead_in = time.perf_counter() - t0
            if self.max_examples is not None:
                chunk = chunk[:max(self.max_examples - self.examples_seen, 0)]
            if not chunk:
                return "max examples", since_snap
            if type(chunk) is RecordRows and pacer is None and self._takes_rows():
                # flat rows validated by the source, as one array: the model's own conversion
                # of such a record (``Estimator.coerce_input``) changes nothing
                xs, ys, recs = chunk.X, chunk.y, chunk
            elif pacer is None and type(chunk) is DictRecords and self._takes_rows() \
                    and set(map(type, ys := [r.y for r in chunk])) <= _PLAIN_LABELS:
                # dicts of features the source validated as one (a FeatureDicts), str / int
                # labels: the model encodes them from its arrays (its conversion of such a
                # record, ``Estimator.coerce_input``, changes nothing)
                xs, recs = chunk.features, chunk
            elif pacer is None and self._takes_plain(chunk):
                # dicts of features with str / int labels: the model's conversion of such a
                # record (``Estimator.coerce_input``) changes nothing
                xs, ys, recs = [r.x for r in chunk], [r.y for r in chunk], chunk
            else:
                xs, ys, recs = [], [], []
                coerce = self.model.coerce_input
                for rec in chunk:
                    if pacer is not None:
                        pacer.wait()
                    try:
                        x, y = coerce(rec.x, rec.y)
                    except Exception as e:  # noqa: BLE001 - one record never stops the stream
                        self._bad(rec, reason_of(e))
                        continue
                    xs.append(x)
                    ys.append(y)
                    recs.append(rec)
            done, poisoned = self._predict_learn(xs, ys, recs) if len(ys) else (([], [], []), None)
            if poisoned is not None:
                if self._undo(poisoned, _NONFINITE, span=len(done[0]) + 1):
                    return "undo", since_snap
                # nothing to go back to: the model cannot be trusted; stop rather than poison
                raise RuntimeError(_CANNOT_UNDO)
            self.position = chunk.position_of(len(chunk) - 1) if type(chunk) is RecordRows else chunk[-1].position
            before = self.examples_seen
            self.metrics.update_many(done[0], done[1])
            if self.sink is None:
                self.examples_seen += len(done[0])
            else:
                keys = done[2].keys if type(done[2]) is RecordRows else [r.key for r in done[2]]
                for p, key in zip(done[1], keys):
                    self.examples_seen += 1
                    self.sink.write({"key": key, "prediction": _jsonable(p), "examples_seen": self.examples_seen})
            since_snap += self.examples_seen - before
            if self.snapshot_every and self.examples_seen // self.snapshot_every > before // self.snapshot_every:
                since_snap = 0
                self.snapshot(t0, seen0)
            if self.examples_seen // self.checkpoint_every > before // self.checkpoint_every:
                if not self._weights_finite(full=True):   # never checkpoint non-finite weights
                    if self._undo(_SOMEWHERE, _NONFINITE):
                        return "undo", since_snap
                    raise RuntimeError(_CANNOT_UNDO)
                self.checkpoint()
            if prog.enabled:   # the metrics' dict only for a display
                gap = self.last_certificate["gap"] if self.last_certificate else None
                prog.update(self.examples_seen, self.metrics.get(), gap, new_this_run=self.examples_seen - seen0)
            if self.max_examples is not None and self.examples_seen >= self.max_examples:
                return "max examples", since_snap
            stop = self._interactive_stop(seen0)
            if stop:
                return stop, since_snap
        return "end of source", since_snap

    def _mark_start(self):
        """The in-memory restore point of :meth:`_undo` when no checkpoint was restored: the
        model as it starts and the source's position."""
        if self.resumed_from is not None:
            return
        saved = self.position
        if self.position is None:
            self.position = self.source.position()
        ckpt, self.ckpt = self.ckpt, None
        try:
            self.checkpoint()   # in memory only
        finally:
            self.ckpt = ckpt
            self.position = saved

    def _run_loop(self, t0, seen0, prog):
        """:meth:`_loop` until it stops for another reason than an undo; the weights are checked
        finite before the final checkpoint."""
        self._mark_start()
        while True:
            stopped, since_snap = self._loop(t0, seen0, prog)
            if stopped == "undo":
                continue
            if not self._weights_finite(full=True):
                if self._undo(_SOMEWHERE, _NONFINITE):
                    continue
                raise RuntimeError(_CANNOT_UNDO)
            return stopped, since_snap

    # ------------------------------------------------------------------ interactive runs
    def request_stop(self, signum=None):
        """Ask the loop to stop after the record in progress (a signal handler calls this); the
        run then checkpoints and returns with ``stopped == "interrupted"``."""
        self.stop_signal = signum if signum is not None else 0

    def bad_counts(self, seen0=0, bad0=0):
        """(bad records, records read) in this run: the engine's and the source's bad records."""
        bad = self.bad_records - bad0 + int(self.source.n_bad or 0)
        return bad, bad + self.examples_seen - seen0

    def _interactive_stop(self, seen0):
        if self.stop_signal is not None:
            return "interrupted"
        if self.max_bad_fraction is not None:
            bad, total = self.bad_counts(seen0, self._bad0)
            if total >= self.bad_min_records and bad > self.max_bad_fraction * total:
                return "too many bad records"
        return None

    def _bad(self, rec, reason):
        self.bad_records += 1
        send_dead_letter(self.dead_letter, rec, reason)

    def run(self):
        """Process the source until it ends or a stop condition holds; returns a summary."""
        if self.resumed_from is None:  # the CLI restores first, to check settings and say so
            try:
                self.restore()
            except BaseException:
                if self.ckpt is not None:
                    self.ckpt.release()   # e.g. SourceChanged: the directory is free again
                raise
        if self.source.group_member:
            self.source.on_revoke = self._on_revoke
            self.source.worker_id = self.worker_id()
        t0 = time.perf_counter()
        self._cpu0 = time.process_time()
        seen0 = self.examples_seen
        self._bad0 = self.bad_records
        prog = Progress(self.progress, self.max_examples)
        self._idle_tail = 0.0
        self._lead_in = None
        try:
            stopped, since_snap = self._run_loop(t0, seen0, prog)
            # the summary's rate: the stream only, from its first record, without the wait that
            # ended it (idle timeout)
            t_stream = (time.perf_counter() - t0 - (self._lead_in or 0.0)
                        - (self._idle_tail if stopped == "idle timeout" else 0.0))
            self._cpu_stream = time.process_time() - self._cpu0
            if stopped == "too many bad records":  # nothing worth keeping: no checkpoint
                self.dead_letter.flush()
                return self._summary(t0, seen0, stopped, t_stream)
            interrupted = stopped == "interrupted"  # checkpoint at once, no refinement or snapshot
            if self.refine_at_end and self.examples_seen and not interrupted:
                gap = self.last_certificate["gap"] if self.last_certificate else None
                prog.finish(self.examples_seen, self.metrics.get(), gap, new_this_run=self.examples_seen - seen0)
                self.model.refine(self.refine_at_end, progress=self.refine_progress)
                self._refined = True
            if not interrupted and self.examples_seen and (since_snap or not self.history or self.refine_at_end):
                self.snapshot(t0, seen0)
            if self.sink is not None:
                self.sink.flush()
            self.checkpoint(source_position=stopped in ("end of source", "idle timeout"))
            if self.dead_letter is not None:
                self.dead_letter.flush()
        finally:
            if self.ckpt is not None:
                self.ckpt.release()
            gap = self.last_certificate["gap"] if self.last_certificate else None
            prog.update(self.examples_seen, self.metrics.get(), gap, force=True,
                        new_this_run=self.examples_seen - seen0)
            prog.close()
        return self._summary(t0, seen0, stopped, t_stream)

    def _summary(self, t0, seen0, stopped, t_stream=None):
        """The run's summary; ``throughput`` is over the stream's time (``seconds_stream``: from
        its first record, so not the wait for it, e.g. a Kafka consumer group's join; not the
        wait without records that ended it at ``idle_timeout``, the refinement, the final
        snapshot or the checkpoint); ``cpu_seconds``: the process's CPU
        time (user + system, every thread) over the whole run, its final snapshot and checkpoint
        included (not the start-up before :meth:`run`: imports, kernel loading, warm-up);
        ``cpu_seconds_stream``: the part of it until the stream stopped (its records, snapshots and
        checkpoints; not the refinement, the final snapshot or checkpoint);
        ``test``: the held-out metrics of the last snapshot (``test=``)."""
        el = time.perf_counter() - t0
        cpu = time.process_time() - self._cpu0 if self._cpu0 is not None else None
        t_stream = el if t_stream is None else t_stream
        test = next((h["test"] for h in reversed(self.history) if "test" in h), None)
        return {"examples_seen": self.examples_seen, "new_examples": self.examples_seen - seen0,
                "bad_records": self.bad_records, "bad_records_at_source": self.n_bad_at_source,
                "n_bad": self.n_bad, "undone": self.undone, "seconds": el, "seconds_stream": t_stream,
                "cpu_seconds": cpu, "cpu_seconds_stream": self._cpu_stream,
                "stopped": stopped, "throughput": (self.examples_seen - seen0) / max(t_stream, 1e-9),
                "metrics": self.metrics.get(), "test": test, "last_certificate": self.last_certificate,
                "position": _jsonable(self.position), "resumed_from": self.resumed_from}


__all__ = ["Engine", "Progress", "TASKS"]
