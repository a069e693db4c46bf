"""A distributed worker: the engine's per-record step (predict, then learn) over its own shard
of the source, with mixing-round hooks. Plain Python: :mod:`._ray` runs it as a Ray actor.

Shards:

* ``{"kind": "kafka", "uri": ..., "partitions": [...]}`` -- a kafka-python consumer on the
  worker's partitions, committing to the job's consumer group. Partitions are assigned by the
  job (round-robin over the topic's partitions, pinned to the worker index) rather than by the
  group coordinator, so that a restarted worker gets back exactly the partitions whose dual
  blocks and offsets its part of the cut holds. Each part records the partition of every block;
  a job resumed with another number of workers moves the blocks with their partitions
  (:meth:`~streamssvm.distributed._mixer.Mixer.regroup`). The group coordinator would move
  partitions whenever a member joins or fails, not at a cut, and stop the group meanwhile:
  measured on the Tansu broker (``bench/kafka_rebalance.py``, session timeout 6 s), 5-7 s for a
  second member to join, 9 s after a member was killed.
* ``{"kind": "file", "uri": ...}`` -- a file source; worker k of K learns the records whose
  number is k modulo K (each worker reads the file, the position carries the record number).
* ``{"kind": "arrays", "X": [...], "Y": [...]}`` -- in-memory examples, sharded the same way.
"""
from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import numpy as np

from ..checkpoint import save_state
from ..connectors.base import Record, Source
from ..metrics import ProgressiveMetrics
from ..run_state import parse_run_state, run_state
from ..step import BAD, LEARNED, Outcome, reason_of, send_dead_letter, step
from ._cut import PART_KIND, PartChunker, copy_arrays, file_sha256, load_part
from ._bcfw import unbound_window, window_share
from ._mix import average_step, make_mixing, union_lam
from ._sparse import nbytes, pack

_END = object()


def _learns(model, rec):
    """Whether ``step(model, rec)`` would learn ``rec``: not a bad record (``step`` leaves the model
    unchanged for one) and a weight other than 0. A full window evicts only for such a record, as
    one process's learner evicts inside ``learn``, after the record's checks."""
    try:
        x, y = model.coerce_input(rec.x, rec.y)
        if model._weighted_start(x, y, rec.w) is None:   # w=0: nothing learned
            return False
        model._check_record(x, y)
    except Exception:  # noqa: BLE001 - the record is bad: step() reports it
        return False
    return True


def model_from_state(st):
    """An estimator from its ``state()`` (through the estimators' own loader)."""
    from ..estimators.base import from_state
    return from_state(st)


def _partition(origin):
    """The partition of a Kafka record's origin ``topic/partition@offset`` (-1 for other sources)."""
    try:
        return int(origin.rsplit("/", 1)[1].split("@", 1)[0])
    except (IndexError, ValueError, AttributeError):
        return -1


class _PartWrite:
    """One part written by a background thread: dead letters synced, the state saved (atomic,
    fsynced), its SHA-256 taken; :meth:`result` joins and returns the description or raises."""

    def __init__(self, worker, round_id, path, state, timings):
        self.worker, self.round_id, self.path, self.state = worker.index, round_id, path, state
        self.chunker = worker.chunker
        self.dead_letter = worker.source.dead_letter
        self.timings = dict(timings)
        self.out, self.error = None, None
        self.thread = threading.Thread(target=self._write, name=f"cut-part-{round_id}", daemon=True)
        self.thread.start()

    def _write(self):
        try:
            t0, c0 = time.perf_counter(), time.thread_time()
            if self.dead_letter is not None:
                self.dead_letter.sync()   # durable before the cut that counts them
            t1 = time.perf_counter()
            state = self.state
            if self.chunker is not None:
                state = self.chunker.split(state, self.round_id, f"{self.path.parent.name}/{self.path.name}")
            t2 = time.perf_counter()
            tm = {}
            p = save_state(self.path, state, kind=PART_KIND, meta={"worker": self.worker, "round": self.round_id},
                           timings=tm)
            t3 = time.perf_counter()
            sha = file_sha256(p)
            deps = self.chunker.written(self.round_id, p, sha) if self.chunker is not None else []
            self.state = state = None
            self.timings.update(dead_letters=t1 - t0, chunks=t2 - t1, encode=tm["encode"], write=tm["write"],
                                fsync=tm["fsync"], sha256=time.perf_counter() - t3,
                                seconds=time.perf_counter() - t0, cpu=time.thread_time() - c0)
            self.out = {"worker": self.worker, "round": self.round_id, "path": str(p), "sha256": sha,
                        "bytes": p.stat().st_size, "timings": self.timings, "deps": deps}
        except BaseException as e:  # noqa: BLE001 - handed to the caller of result()
            self.error = e

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.out


class ArrayShard(Source):
    """Examples ``k, k + K, k + 2K, ...`` of in-memory lists; position ``{"record": next index}``."""

    name = "arrays"

    def __init__(self, X, Y, index, n_workers):
        super().__init__()
        self.X, self.Y = X, Y
        self.index, self.n_workers = int(index), int(n_workers)
        self.next = self.index

    def position(self):
        return {"record": self.next}

    def seek(self, position):
        self.next = int(position["record"])

    def __iter__(self):
        while self.next < len(self.X):
            i = self.next
            self.next += self.n_workers
            yield Record(x=self.X[i], y=self.Y[i], key=i, position={"record": self.next}, origin=f"arrays:{i}")


def open_dead_letters(uri):
    """The dead-letter sink of a worker: ``kafka://HOST:PORT/TOPIC``, a JSONL file (every worker
    appends whole lines to it), or None (in memory, with a warning per reason)."""
    from ..connectors.base import DeadLetterSink, JSONLSink
    if uri is None:
        return DeadLetterSink()
    if str(uri).startswith("kafka://"):
        from ..connectors.kafka import KafkaSink, parse_kafka_uri
        d = parse_kafka_uri(uri)
        return DeadLetterSink(KafkaSink(d["bootstrap"], d["topic"]))
    return DeadLetterSink(JSONLSink(str(uri)[len("file://"):] if str(uri).startswith("file://") else uri))


class _ShareOfDeadLetters:
    """The dead letters of a file every worker reads whole: worker k sends (and counts) the bad
    lines whose number is k modulo K, so each bad line is reported once by the job."""

    def __init__(self, sink, index, n_workers):
        self.sink, self.index, self.n_workers = sink, index, n_workers
        self.count = 0
        self.max_raw_bytes = sink.max_raw_bytes
        self.warn = getattr(sink, "warn", False)

    def send(self, raw, reason, origin="", size=None):
        try:
            line = int(str(origin).rsplit(":", 1)[1])
        except (IndexError, ValueError):
            line = 0
        if line % self.n_workers == self.index:
            self.count += 1
            self.sink.send(raw, reason, origin, size)

    def __getattr__(self, name):   # flush, sync, close, reasons ...
        return getattr(self.sink, name)


class FileShard(Source):
    """Records k mod K of a file source (the file source's own positions, which count records);
    bad lines are this worker's when their line number is k mod K."""

    def __init__(self, uri, index, n_workers, dead_letter=None):
        from ..connectors.files import open_source
        super().__init__()
        self.index, self.n_workers = int(index), int(n_workers)
        self.dead_letter = dead_letter if dead_letter is not None else open_dead_letters(None)
        self._share = _ShareOfDeadLetters(self.dead_letter, self.index, self.n_workers)
        self.src = open_source(uri, dead_letter=self._share)

    @property
    def n_bad(self):
        return self._share.count

    @n_bad.setter
    def n_bad(self, v):   # Source.__init__ sets it
        pass

    def position(self):
        return self.src.position()

    def seek(self, position):
        self.src.seek(position)

    def __iter__(self):
        for rec in self.src:
            if rec is None:
                yield None
                continue
            number = int(rec.position.get("record", 0)) - 1
            if number % self.n_workers == self.index:
                yield rec


def open_shard(spec, index, n_workers, worker_id):
    kind = spec["kind"]
    dead = open_dead_letters(spec.get("dead_letter"))
    if kind == "arrays":
        X, Y = spec["X"], spec["Y"]
        if not isinstance(X, (list, tuple)):   # Ray object references (nested ones are not resolved)
            import ray
            X, Y = ray.get(X), ray.get(Y)
        shard = ArrayShard(X, Y, index, n_workers)
        shard.dead_letter = dead
        return shard
    if kind == "file":
        return FileShard(spec["uri"], index, n_workers, dead_letter=dead)
    if kind == "kafka":
        from ..connectors.kafka import KafkaSource, parse_kafka_uri
        d = parse_kafka_uri(spec["uri"])
        src = KafkaSource(d["bootstrap"], d["topic"], group=spec.get("group"), partitions=spec["partitions"],
                          stop_at_end=bool(spec.get("stop_at_end", False)), session_timeout_ms=6000,
                          heartbeat_interval_ms=1000, dead_letter=dead)
        src.worker_id = worker_id
        return src
    raise ValueError(f"unknown shard kind {kind!r}")


class Worker:
    """One worker of a distributed job (see the module docstring).

    Parameters
    ----------
    index, n_workers
        This worker's number and the number of workers K.
    model
        A fresh estimator (labels declared) -- or None when restoring from a part.
    task
        The engine task (``"multiclass"``, ``"sequence"``, ...).
    shard
        The source spec of this worker (see the module docstring).
    kind, lam, beta
        Mixing kind (``"bcfw"`` or ``"ipm"``), the model's lambda, the mixing weight beta.
    job_id
        Identity of the job (Kafka commit metadata, so a restarted worker trusts its own offsets).
    line_search
        BCFW: report the blocks' loss sum at the round start and its change over the round, for
        the mixer's line search (``mix_step="line"`` / ``"adaptive"``) and its average of the
        mixed points (``averaging=True``).
    incremental_cuts
        Write only the chunks of the state that changed since this worker's previous part
        (:class:`~streamssvm.distributed._cut.PartChunker`); False: every part whole.
    """

    def __init__(self, index, n_workers, model, task, shard, kind, lam, beta, job_id="job", line_search=False,
                 incremental_cuts=True):
        self.index = int(index)
        self.n_workers = int(n_workers)
        self.task = task
        self.kind = kind
        self.model = model
        self.mixing = make_mixing(kind, lam, n_workers, beta, line_search)
        self.metrics = ProgressiveMetrics(task)
        self.examples_seen = 0
        self.bad_records = 0
        self.bad_at_source = 0     # the source's own rejections up to the restored cut
        self.n_global = 0
        self.position = None
        self.ended = False
        self.learn_seconds = 0.0
        self.learn_cpu = 0.0
        self.worker_id = f"{job_id}-w{self.index}"
        self.block_partitions = []   # source partition of each learned example, in arrival order
        self.source = open_shard(shard, self.index, self.n_workers, self.worker_id)
        self._src_bad0 = 0
        self._it = None
        self._part = None            # the part of an asynchronous cut being written (_PartWrite)
        self._cut_positions = {}     # round -> source position snapshotted for that round's cut
        self.chunker = PartChunker() if incremental_cuts else None
        # BCFW(averaging=True): the mixer's average of the mixed points as of the last mix, which
        # this worker's progressive predictions use (None: the worker predicts with its iterate)
        self.average = None
        self._predictor = None
        # the mixer's last mixed point as this worker holds it (the base of the next broadcast's
        # changes, ._sparse.Changes) and its round; None: not held (after a restore), the next
        # apply takes the whole point. At the start both are the mixer's: no weights, round 0.
        self.held, self.held_round = {}, 0
        if kind == "bcfw" and model is not None and model.learner.window is not None:
            # the union's FIFO window W: this worker keeps its share W_k of it, its learner runs
            # unbounded (derivation in ._bcfw, "Eviction windows per worker")
            self.mixing.window = window_share(model.learner.window, self.index, self.n_workers)
            self.model = model.clone({"learner": model.learner.clone({"window": None})})

    # ------------------------------------------------------------------ cut parts
    def restore(self, part_path):
        """Resume from this worker's part of a committed cut."""
        st, _ = load_part(part_path, kind=PART_KIND)
        w = parse_run_state(st, "worker")
        if self.chunker is not None:
            self.chunker.reset()   # the next part is whole
        self.model, self.examples_seen, self.bad_records = w["model"], w["examples_seen"], w["bad_records"]
        self.held, self.held_round = None, None   # the next apply takes the whole mixed point
        self._predictor = None   # (shared the replaced model's indexes; follow_average builds it again)
        if self.kind == "bcfw":
            unbound_window(self.model)   # a part written before the workers kept the windows
        self.bad_at_source = int(w.get("bad_at_source", 0))
        self._src_bad0 = self.source.n_bad
        self.metrics = w["metrics"]
        self.n_global = int(w["n_global"])
        self.ended = bool(w["ended"])
        self.learn_seconds = float(w["learn_seconds"])
        self.learn_cpu = float(w["learn_cpu"])
        self.position = w["position"]
        self.block_partitions = [int(v) for v in np.asarray(w.get("block_partitions", []))]
        if "sigma" in w and hasattr(self.mixing, "sigma"):   # adaptive mixing's sigma' of the next round
            self.mixing.sigma = float(w["sigma"])
        if hasattr(self.mixing, "loss_next"):   # the line search's loss sum carried to the next round
            self.mixing.loss_next = None if w.get("loss_next") is None else float(w["loss_next"])
        if self.position is not None:
            self.source.seek(self.position)
        return self.examples_seen

    def save_part(self, round_id, path):
        """Write this worker's part of the cut of ``round_id`` durably; returns its description."""
        self.start_part(round_id, path)
        return self.finish_part()

    def start_part(self, round_id, path):
        """Snapshot this worker's part of the cut of ``round_id`` now and write it in a background
        thread while the next round learns (an asynchronous cut); :meth:`finish_part` (called by
        the next :meth:`learn_round`) waits for it and returns its description. The snapshot
        copies every array of the state, so the learning that follows cannot change what is
        written; the part is durable (fsynced, renamed into place) before it is described."""
        self.finish_part()   # at most one part in flight
        t0, c0 = time.perf_counter(), time.process_time()
        state = run_state(self.model, "worker", examples_seen=self.examples_seen, bad_records=self.bad_records,
                          bad_at_source=self.n_bad_at_source,
                          metrics=self.metrics, position=self.position, index=self.index, round=int(round_id),
                          n_global=self.n_global, ended=self.ended, learn_seconds=self.learn_seconds,
                          learn_cpu=self.learn_cpu,
                          block_partitions=np.asarray(self.block_partitions, dtype=np.int64),
                          sigma=float(getattr(self.mixing, "sigma", 1.0)),
                          loss_next=getattr(self.mixing, "loss_next", None))
        state = copy_arrays(state)
        self._cut_positions[int(round_id)] = copy.deepcopy(self.position)
        snap = {"snapshot": time.perf_counter() - t0, "snapshot_cpu": time.process_time() - c0}
        self._part = _PartWrite(self, int(round_id), Path(path), state, snap)
        return snap

    def finish_part(self):
        """Wait for the part being written (if any) and return its description (None if none):
        ``{"worker", "round", "path", "sha256", "bytes", "timings"}``; a failed write raises."""
        if self._part is None:
            return None
        part, self._part = self._part, None
        return part.result()

    def commit_offsets(self, round_id=None):
        """Commit the source position of the last committed cut (Kafka: to the consumer group):
        the position snapshotted for the cut of ``round_id``, or the current one."""
        position = self.position if round_id is None else self._cut_positions.get(int(round_id), self.position)
        if round_id is not None:   # positions of older cuts are never committed after a newer one
            self._cut_positions = {r: v for r, v in self._cut_positions.items() if r > int(round_id)}
        if position is not None:
            self.source.commit(position)
        return True

    @property
    def n_bad_at_source(self):
        """Records the shard's source rejected itself (unparsable, ...), resumed rounds included."""
        return self.bad_at_source + int(self.source.n_bad or 0) - self._src_bad0

    # ------------------------------------------------------------------ rounds
    def learn_round(self, max_examples, max_seconds=None, idle_timeout=None, refine_passes=0.0):
        """Learn up to ``max_examples`` new examples of the shard (or for ``max_seconds``), then
        ``refine_passes`` local passes over the held blocks; returns ``(info, delta)``."""
        t0, c0 = time.perf_counter(), time.process_time()
        self.mixing.round_start(self.model, self.n_global)
        if self._it is None:
            self._it = iter(self.source)
        n_new = 0
        last = time.monotonic()
        while not self.ended and n_new < max_examples:
            if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                break
            rec = next(self._it, _END)
            if rec is _END:
                self.ended = True
                break
            if rec is None:
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    self.ended = True
                    break
                continue
            last = time.monotonic()
            if rec.w != 1.0 and rec.w != 0.0 and not self.mixing.example_weights:
                # refused before any state changes: a held weight would stop the job at the mix
                out = Outcome(BAD, reason=f"distributed {self.mixing.kind} learning takes example weights of "
                                          f"1 (or 0) only, got {rec.w!r}")
            else:
                if self.mixing.full(self.model) and _learns(self.model, rec):
                    self.mixing.make_room(self.model)   # a full window evicts its oldest block first
                out = step(self.model, rec) if self._predictor is None else self._step_averaged(rec)
            self.position = rec.position
            if out.bad:
                self.bad_records += 1
                if self.source.dead_letter is not None:
                    send_dead_letter(self.source.dead_letter, rec, out.reason)
                continue
            self.examples_seen += 1
            self.block_partitions.append(_partition(rec.origin))
            self.metrics.update(out.y, out.prediction)
            n_new += 1
            if n_new % 32 == 0:
                self.mixing.prepare(self.model)
        self._check_index()
        self.mixing.check(self.model)
        if refine_passes > 0:
            self.mixing.prepare(self.model)
            if self.model.bound_learner is not None:
                self.model.bound_learner.refine(refine_passes)
        self.learn_seconds += time.perf_counter() - t0
        self.learn_cpu += time.process_time() - c0
        delta = pack(self.mixing.delta(self.model))   # its non-zero entries (._sparse)
        part = self.finish_part()    # the previous round's asynchronous part, written meanwhile
        info = {"part": part,"worker": self.index, "n_new": n_new, "n_blocks": self.mixing.n_blocks(self.model),
                "examples_seen": self.examples_seen, "ended": self.ended, "seconds": time.perf_counter() - t0,
                "cpu": time.process_time() - c0, "learn_seconds": self.learn_seconds, "learn_cpu": self.learn_cpu,
                "bytes_up": nbytes(delta), "held_round": self.held_round, "metrics": self.metrics.get(),
                "loss_delta": self.mixing.loss_delta(self.model),
                **self.mixing.totals(self.model),
                "bad_records": self.bad_records, "bad_at_source": self.n_bad_at_source, "position": self.position}
        return info, delta

    def _check_index(self):
        fi = self.model._features
        if fi.n_features is None and fi.vocab:
            raise ValueError("distributed learning needs one feature index for all workers: use array inputs "
                             "or the hashing trick (n_features=2**k) instead of a growing vocabulary")

    def apply(self, mixed, n_global, committed=None, whole=None):
        """Install the mixed weights (and blend the dual blocks) broadcast by the mixer; with
        ``committed`` (the mixer's report of a cut it committed, ``{"round", ...}``), commit the
        source offsets of that cut. The broadcast holds the entries that moved since the mixed
        point this worker holds (``mixed["changes"]``); ``whole``: the mixer's whole mixed point,
        needed when the worker does not hold the previous one (``held_round`` of its round info
        differs from the changes' ``base_round``: after a restore)."""
        if committed is not None:
            if int(committed["round"]) not in self._cut_positions:
                raise RuntimeError(f"worker {self.index} holds no position of the cut of round {committed['round']}")
            self.commit_offsets(int(committed["round"]))
        self.n_global = int(n_global)
        changes = mixed["changes"]
        if whole is not None:
            weights = {k: np.array(v, dtype=np.float64) for k, v in whole.items()}
        elif self.held is not None and self.held_round == changes.base_round:
            weights = changes.apply(self.held)
        else:
            raise RuntimeError(f"worker {self.index} holds the mixed point of round {self.held_round}, the broadcast "
                               f"changes that of round {changes.base_round}: pass the whole mixed point")
        self.held, self.held_round = weights, changes.round
        self.mixing.apply(self.model, weights, self.n_global, mixed.get("gamma"), mixed.get("sigma"))
        moved = mixed.get("average_step")
        if self.average is not None and moved is not None:
            if moved["restart"]:
                self.average = {}
            if moved["f"] > 0.0:
                self.average = average_step(self.average, weights, moved["f"])
            self._install_average()
        return True

    # ------------------------------------------------------------------ averaged predictions
    def follow_average(self, U):
        """Predict with the mixer's average of the mixed points: ``U`` is U_bar as of the last mix
        (``{}``: nothing averaged yet). Called by the driver when the job averages (at its start
        and after every restore, with the mixer's own copy); every :meth:`apply` then moves it as
        the mixer moved it (``average_step``), so the worker holds the mixer's U_bar bit for bit.

        What is exact: the average exists at round boundaries only (the mixer averages the mixed
        points, the only points of the union). During round r + 1 a worker therefore predicts each
        record with U_bar of round r -- what the returned model would predict with had the job
        stopped at that boundary -- and not with an average moving record by record as one
        process's does; before the first mix that averaged a step (U empty) it predicts with its
        own iterate, which is then the start point 0, as one process predicts its first record.
        With one worker and rounds of one record the two agree record for record."""
        self.average = {k: np.array(v, dtype=np.float64) for k, v in (U or {}).items()}   # (own, writable)
        self._install_average()
        return True

    def _install_average(self):
        if not self.average:
            self._predictor = None
            return
        if self._predictor is None:
            # an estimator of its own (no blocks) sharing the worker's feature and label indexes,
            # which prediction only reads; its weights are U_bar
            p = self.model.clone()
            p._features, p._labels = self.model._features, self.model._labels
            p._sync()
            self._predictor = p
        lr = self._predictor.bound_learner
        lr.ensure(self.model._features.dim, self.model._labels.labels)
        lr.set_parameters(self.average)
        n = max(int(self.n_global), 1)
        lr.set_union(union_lam(self.mixing.lam, n), n)

    def _step_averaged(self, rec):
        """``step(self.model, rec)`` with the prediction made by the averaged weights."""
        try:
            x, y = self.model.coerce_input(rec.x, rec.y)
        except Exception as e:  # noqa: BLE001 - one record never stops the stream
            return Outcome(BAD, reason=reason_of(e))
        try:
            lr = self._predictor.bound_learner
            if self.model._features.dim > lr.W.E.shape[0] or len(self.model._labels) > lr._K:
                lr.ensure(self.model._features.dim, self.model._labels.labels)
            p = self._predictor.predict_one(x)
        except Exception as e:  # noqa: BLE001
            return Outcome(BAD, x=x, y=y, reason=reason_of(e))
        try:   # as predict_learn_one learns after its prediction (the same state)
            if type(rec.w) is float and rec.w == 1.0:
                self.model.learn_one(x, y)
            else:
                self.model.learn_one(x, y, rec.w)
        except Exception as e:  # noqa: BLE001 - a bad record leaves the model unchanged
            return Outcome(BAD, x=x, y=y, reason=reason_of(e))
        return Outcome(LEARNED, p, x, y)

    def block_sums(self):
        """This worker's share of the global certificate at the current (mixed) weights."""
        t0 = time.perf_counter()
        out = self.mixing.block_sums(self.model, self.n_global)
        out["seconds"] = time.perf_counter() - t0
        out["worker"] = self.index
        return out

    def model_state(self):
        return self.model.state()

    def ping(self):
        return self.index

    def node_id(self):
        """The Ray node this worker runs on (placement checks; "" outside Ray)."""
        try:
            import ray
            return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
        except Exception:  # noqa: BLE001 - not inside a Ray worker
            return ""

    def close(self):
        self.source.close()
        if self.source.dead_letter is not None:
            self.source.dead_letter.close()
        return True
