"""The driver: starts (or joins) a Ray cluster, runs the mixing rounds, restarts from the last
consistent cut when a worker dies."""
from __future__ import annotations

import os
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import ray

from ..certificate import Certificate
from ..params import Param
from ._mix import learner_kind
from ._cut import part_path
from ._mixer import Mixer
from ._worker import Worker, model_from_state

_REPO_ROOT = str(Path(__file__).resolve().parents[2])


def runtime_env():
    """The Ray runtime environment that makes actors import this checkout's ``streamssvm`` and
    ``connectors`` (the directory holding both goes first on their PYTHONPATH)."""
    pp = os.environ.get("PYTHONPATH", "")
    return {"env_vars": {"PYTHONPATH": _REPO_ROOT + (os.pathsep + pp if pp else "")}}


def init_cluster(cluster="local", num_cpus=None, **kwargs):
    """Start a private local Ray cluster (``"local"``) or connect to one (``"ray://host:port"``
    or ``"auto"``); a no-op when Ray is already initialized. Returns True when it started one.

    ``"local"`` always starts a cluster of its own (``ray.init(address="local")``): without an
    address Ray would join the cluster named by ``RAY_ADDRESS`` or by the last ``ray start`` /
    ``ray.cluster_utils.Cluster`` on this machine (one left running by a killed job, say), and
    refuse ``num_cpus`` there ("When connecting to an existing cluster, num_cpus and num_gpus
    must not be provided"). To use a running cluster, pass its address or ``"auto"``."""
    if ray.is_initialized():
        return False
    kw = dict(include_dashboard=False, runtime_env=runtime_env(), log_to_driver=False)
    kw.update(kwargs)
    if cluster in (None, "local"):
        ray.init(address="local", num_cpus=num_cpus, **kw)
    elif isinstance(cluster, str) and (cluster.startswith("ray://") or cluster == "auto"):
        kw.pop("include_dashboard", None)
        ray.init(address=cluster, **kw)
    else:
        raise ValueError(f"cluster must be 'local', 'auto' or 'ray://host:port', got {cluster!r}")
    return True


def _source_spec(source, n_workers, inprocess=False):
    """Per-worker shard specs from ``source``: a ``kafka://`` URI, a file path / URI, or a pair
    ``(X, Y)`` of in-memory examples."""
    if isinstance(source, tuple) and len(source) == 2:
        X, Y = source
        if len(X) != len(Y):
            raise ValueError(f"X and Y have different lengths ({len(X)} vs {len(Y)})")
        ref = (list(X), list(Y)) if inprocess else (ray.put(list(X)), ray.put(list(Y)))
        return [{"kind": "arrays", "X": ref[0], "Y": ref[1]} for _ in range(n_workers)]
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a kafka:// URI, a file path or a pair (X, Y), got {type(source).__name__}")
    source = str(source)
    if source.startswith("kafka://"):
        from ..connectors.kafka import parse_kafka_uri
        d = parse_kafka_uri(source)
        params = dict(d["params"])
        group = params.pop("group", "streamssvm-distributed")
        stop = params.pop("stop_at_end", "false").lower() in ("1", "true", "yes")
        parts = params.pop("partitions", None)
        if params:
            raise ValueError(f"unknown Kafka source parameters: {sorted(params)}")
        if parts is not None:
            parts = [int(v) for v in parts.split(",") if v.strip()]
        else:
            parts = _topic_partitions(d["bootstrap"], d["topic"])
        if len(parts) < n_workers:
            raise ValueError(f"topic {d['topic']!r} has {len(parts)} partitions for {n_workers} workers: a worker "
                             "needs at least one partition")
        uri = f"kafka://{d['bootstrap']}/{d['topic']}"
        return [{"kind": "kafka", "uri": uri, "group": group, "stop_at_end": stop,
                 "partitions": parts[k::n_workers]} for k in range(n_workers)]
    return [{"kind": "file", "uri": source} for _ in range(n_workers)]


def _topic_partitions(bootstrap, topic, timeout=30.0):
    from .._optional import require
    require("kafka", extra="kafka", feature="a kafka:// source")
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while True:
            ps = c.partitions_for_topic(topic)
            if ps:
                return sorted(ps)
            if time.monotonic() > deadline:
                raise ValueError(f"topic {topic!r} not found at {bootstrap}")
            time.sleep(0.2)
    finally:
        c.close()


@dataclass
class DistributedResult:
    """What :func:`run` returns.

    Attributes
    ----------
    model
        The mixed model as one estimator (BCFW: the union of every worker's dual blocks with the
        mixed weights -- its ``certificate()`` is the single-process certificate; with
        ``averaging=True`` it predicts with the mixer's step-weighted average of the mixed points
        and its ``certificate()`` certifies that average, as one process's does; SGD: the mixed
        weights with worker 0's window).
    certificate
        The last global certificate (a dict in the ``Certificate`` format): of the mixed point
        (the iterate), also when the model predicts with the average.
    history
        One record per round (examples, blocks, bytes, seconds, per-worker throughput,
        certificate when computed).
    rounds, restarts, examples_seen
        Rounds run (resumed ones included), restarts from a cut, examples reflected in the model.
    bad_records, stopped
        Records sent to the dead letters (by the workers' step and by their sources), and why
        the job stopped (``"too many bad records"`` past ``max_bad_fraction``, else ``"done"``).
    """
    model: object
    certificate: dict | None
    history: list
    rounds: int
    restarts: int
    examples_seen: int
    workers: list = field(default_factory=list)
    bad_records: int = 0
    stopped: str = "done"


class _Job:
    def __init__(self, model, shards, task, kind, n_workers, directory, keep, worker_cpus, job_id,
                 mixing=None, inprocess=False, cuts=None):
        self.template = model
        mixing = dict(mixing or {})   # {"beta": float (1.0), "step": "fixed" | "line" | "adaptive"}
        beta, mix_step = float(mixing.get("beta", 1.0)), mixing.get("step", "fixed")
        self.adaptive = mix_step == "adaptive"
        line_search = mix_step in ("line", "adaptive")
        # BCFW(averaging=True): the mixer averages the mixed points; the workers run without an
        # average of their own (their local views are not points of the union; see ._bcfw)
        self.averaging = kind == "bcfw" and bool(getattr(model.learner, "averaging", False))
        self.worker_template = model.clone({"learner": model.learner.clone({"averaging": False})}) \
            if self.averaging else model
        # inprocess: the mixer and the workers are plain objects called in turn (:mod:`._inprocess`)
        self.inprocess = bool(inprocess)
        cuts = dict(cuts or {})   # {"asynchronous": bool (False), "incremental": bool (True)}
        self.async_cuts = bool(cuts.get("asynchronous", False))
        self.incremental_cuts = bool(cuts.get("incremental", True))
        self.pending = None      # round of the asynchronous cut whose parts are being written
        self.committing = None   # round of the cut the mixer is committing
        self._commit_call = None
        self.line_search = bool(line_search)
        self.loss_sums = self.line_search or self.averaging   # the workers report their loss sums
        self.shards = shards
        self.task = task
        self.kind = kind
        self.K = n_workers
        self.beta = beta
        self.directory = directory
        self.keep = keep
        self.worker_cpus = worker_cpus
        self.job_id = job_id
        # BCFW(lam=None): lambda follows the union's n as in a single run (union_lam), so the global
        # certificate and the saved model's own certify the same objective
        lam = model.learner.lam
        self.lam = None if lam is None else float(model.learner.effective_lam(1))
        self.workers = []
        self.mixer = None
        self.round = 0
        self.n_global = 0
        self.stream_ended = False   # the last round ended the stream (its cut is taken)

    def start(self):
        """Create the mixer and the workers; restore all of them from the newest valid cut."""
        self.pending = self.committing = None   # a cut in flight when a worker died is lost
        self._commit_call = None
        if self.inprocess:
            from ._inprocess import actor_class
            MixerActor, WorkerActor = actor_class(Mixer), actor_class(Worker)
        else:
            MixerActor = ray.remote(Mixer).options(num_cpus=0, max_restarts=0)
            WorkerActor = ray.remote(Worker).options(num_cpus=self.worker_cpus, max_restarts=0)
        self.mixer = MixerActor.remote(self.K, self.kind, self.lam, self.beta, str(self.directory), self.keep,
                                       self.line_search, self.adaptive, self.averaging, self.incremental_cuts)
        self.workers = [WorkerActor.remote(k, self.K, self.worker_template.clone(), self.task, self.shards[k],
                                           self.kind, self.lam, self.beta, self.job_id, self.loss_sums,
                                           self.incremental_cuts)
                        for k in range(self.K)]
        if self.shards[0]["kind"] == "kafka":
            # a changed number of workers moves the dual blocks with their partitions
            cut = self.get(self.mixer.regroup.remote([s["partitions"] for s in self.shards]))
        else:
            cut = self.get(self.mixer.restore.remote())
        if cut is not None and cut.get("restarted_average"):
            warnings.warn(f"the cut of round {cut['round']} holds no average of the mixed points (a job run with "
                          "averaging=False or by an older version): the average starts at this round",
                          UserWarning, stacklevel=2)
        if cut is not None:
            parts = sorted(cut["parts"], key=lambda p: p["worker"])
            self.get([w.restore.remote(p["path"]) for w, p in zip(self.workers, parts)])
            self.round = int(cut["round"])
            self.n_global = int(cut["n_global"])
        else:
            self.get([w.ping.remote() for w in self.workers])
            self.round = 0
            self.n_global = 0
        if self.averaging:
            # the workers predict with the mixer's average (as of the cut), moved by every mix
            avg = self.get(self.mixer.averaged.remote())
            self.get([w.follow_average.remote(avg["U"]) for w in self.workers])
        return cut

    def get(self, refs, timeout=None):
        """``ray.get`` (in process: the values themselves)."""
        return refs if self.inprocess else ray.get(refs, timeout=timeout)

    def stop(self):
        if self.inprocess:
            self.workers, self.mixer = [], None
            return
        for a in self.workers + ([self.mixer] if self.mixer is not None else []):
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.workers, self.mixer = [], None

    def one_round(self, max_examples, max_seconds, idle_timeout, refine_passes, certify, cut=True, last=False):
        r = self.round + 1
        t0 = time.perf_counter()
        outs = [w.learn_round.options(num_returns=2).remote(max_examples, max_seconds, idle_timeout, refine_passes)
                for w in self.workers]
        infos = self.get([o[0] for o in outs])
        t_learn = time.perf_counter() - t0
        written = [i.get("part") for i in infos]   # the previous round's asynchronous parts
        tc = time.perf_counter()
        # the cut before was committed by the mixer's thread while this round learned: the workers
        # commit its offsets with the mixed weights (their apply waits for the mixer's answer); the
        # mixer then commits the previous round's cut while the next round learns
        done = self.mixer.wait_commit.remote() if self.committing is not None else None
        self.committing = None
        self.commit_pending(written)
        t_commit = time.perf_counter() - tc
        mixed = self.mixer.mix.remote(r, [i["n_blocks"] for i in infos], *[o[1] for o in outs],
                                      loss_deltas=[i.get("loss_delta") for i in infos],
                                      totals=[{k: i.get(k) for k in ("steps", "loss_start", "evicted",
                                                                     "removed", "removed_loss")} for i in infos])
        n_global = sum(i["n_blocks"] for i in infos)
        # the broadcast holds the entries that moved since the last mixed point (round self.round);
        # a worker holding another one (restored from a cut) also gets the whole point
        stale = [i.get("held_round") != self.round for i in infos]
        whole = self.mixer.weights.remote() if any(stale) else None
        self.get([w.apply.remote(mixed, n_global, done, whole if s else None) for w, s in zip(self.workers, stale)])
        committed = self.get(done) if done is not None else None
        if done is not None and committed is None:
            raise RuntimeError("the mixer lost the cut it was committing")
        t_mix = time.perf_counter() - t0 - t_learn
        cert = None
        if certify:
            sums = [w.block_sums.remote() for w in self.workers]
            cert = self.get(self.mixer.certificate.remote(self.get(sums)))
        t_cert = time.perf_counter() - t0 - t_learn - t_mix
        got = self.get(mixed)
        mix_bytes = got["bytes"]
        whole_bytes = got["bytes_whole"] * sum(stale)
        seen = sum(i["examples_seen"] for i in infos)
        n_metric = sum(i["metrics"].get("n", 0) for i in infos) if all("n" in i["metrics"] for i in infos) else None
        rec = {"round": r, "examples_seen": seen, "new_examples": sum(i["n_new"] for i in infos),
               "n_blocks": n_global, "time": time.time(), "ended": all(i["ended"] for i in infos),
               "refine_passes": refine_passes, "bytes_up": sum(i["bytes_up"] for i in infos),
               "bytes_down": mix_bytes * self.K + whole_bytes, "seconds_learn": t_learn, "seconds_mix": t_mix,
               "seconds_certificate": t_cert, "gamma": got.get("gamma"),
               "sigma": got.get("sigma"), "overlap": got.get("overlap"),
               "parts_written": [_part_record(p) for p in written if p is not None],
               "workers": [{"worker": i["worker"], "examples_seen": i["examples_seen"], "n_blocks": i["n_blocks"],
                            "round_seconds": i["seconds"], "round_cpu": i["cpu"],
                            "learn_seconds": i["learn_seconds"], "learn_cpu": i["learn_cpu"],
                            "throughput": i["examples_seen"] / max(i["learn_seconds"], 1e-9),
                            "metrics": i["metrics"], "bad_records": i["bad_records"],
                            "bad_at_source": i.get("bad_at_source", 0)} for i in infos],
               "bad_records": sum(i["bad_records"] + i.get("bad_at_source", 0) for i in infos),
               "metrics": _merge_metrics([i["metrics"] for i in infos]), "n_metric": n_metric}
        if cert is not None:
            rec.update({"gap": cert["gap"], "primal": cert["primal"], "dual": cert["dual"], "exact": cert["exact"],
                        "certificate": cert})
        rec["seconds_checkpoint"] = 0.0
        # a cut when the stream ends (once: later refinement rounds follow checkpoint_every)
        rec["cut"] = bool(cut or (rec["ended"] and not self.stream_ended))
        self.stream_ended = bool(rec["ended"])
        t1 = time.perf_counter()
        if rec["cut"]:
            # the consistent cut: every part durable, then the mixer commits, then the offsets
            paths = [str(part_path(self.directory, r, k)) for k in range(self.K)]
            if self.async_cuts and not (last or rec["ended"]):
                # asynchronous: the parts are snapshotted now and written while round r + 1 learns;
                # the mixer commits the cut after that round, while round r + 2 learns
                staged = self.mixer.stage.remote(r, rec)
                snaps = self.get([w.start_part.remote(r, p) for w, p in zip(self.workers, paths)])
                self.get(staged)
                self.pending = r
                rec["cut_snapshot"] = snaps
            else:
                more = self.finish_commit()
                committed = more or committed
                parts = self.get([w.save_part.remote(r, p) for w, p in zip(self.workers, paths)])
                self.get(self.mixer.commit.remote(r, parts, rec))
                self.get([w.commit_offsets.remote(r) for w in self.workers])
                rec["cut_parts"] = [_part_record(p) for p in parts]
        else:
            self.get(self.mixer.note.remote(rec))
        rec["seconds_checkpoint"] = time.perf_counter() - t1 + t_commit
        rec["seconds_cut_commit"] = None if committed is None else committed["seconds"]   # an earlier cut's
        rec["seconds"] = time.perf_counter() - t0
        self.round = r
        self.n_global = n_global
        return rec

    def commit_pending(self, parts):
        """Hand the written parts of the pending asynchronous cut to the mixer (it commits them in
        the background); the offsets follow in :meth:`finish_commit`."""
        if self.pending is None:
            return
        if any(p is None or int(p["round"]) != self.pending for p in parts):
            raise RuntimeError(f"the parts of the cut of round {self.pending} were not all written")
        if self._commit_call is not None:
            self.get(self._commit_call)   # the previous hand-over (long done; raises what it raised)
        self._commit_call = self.mixer.commit_staged.remote(self.pending, parts)
        self.committing, self.pending = self.pending, None

    def finish_commit(self):
        """Wait for the cut being committed, then commit the workers' offsets of that cut."""
        if self.committing is None:
            return None
        got = self.get([self._commit_call, self.mixer.wait_commit.remote()])[1]
        if got is None or int(got["round"]) != self.committing:
            raise RuntimeError(f"the cut of round {self.committing} was not committed")
        self.get([w.commit_offsets.remote(self.committing) for w in self.workers])
        self.committing = None
        return got

    def flush_cuts(self):
        """Finish every asynchronous cut: the pending one is written, committed, its offsets too."""
        self.finish_commit()
        if self.pending is not None:
            self.commit_pending(self.get([w.finish_part.remote() for w in self.workers]))
        self.finish_commit()

    def final_model(self):
        """The mixed model as one estimator (see :class:`DistributedResult`)."""
        states = self.get([w.model_state.remote() for w in self.workers])
        if self.kind != "bcfw":
            return model_from_state(states[0])
        from . import _bcfw
        U = self.get(self.mixer.weights.remote())
        learners = [s["learner"] for s in states if s["learner"] is not None]
        st = dict(states[0])
        st["learner"] = _bcfw.merge_learner_states(learners, U)
        if self.averaging:
            # the model predicts with the mixer's average of the mixed points (see ._bcfw)
            avg = self.get(self.mixer.averaged.remote())
            st["learner"] = _bcfw.averaged_state(st["learner"], avg, avg["L_now"])
            st["config"] = _with_learner_params(st["config"], averaging=True)
        window = self.template.learner.window
        if window is not None:   # the workers' windows add up to the union's (see ._bcfw)
            # (at least the blocks held: workers regrouped from more windows evict at their next arrival)
            cap = max(int(window), int(st["learner"]["store"]["n"]))
            st["learner"]["store"] = {**st["learner"]["store"], "capacity": cap}
            st["config"] = _with_learner_params(st["config"], window=int(window))
        return model_from_state(st)


def _with_learner_params(config, **params):
    """A model state's ``config`` with the learner's parameters updated."""
    lr = dict(config["learner"])
    lr["params"] = {**lr["params"], **params}
    return {**config, "learner": lr}


def _part_record(part):
    """What a round's history keeps of a written part: its round, size and write timings."""
    return {**part.get("timings", {}), "round": part["round"], "bytes": part["bytes"]}


def _merge_metrics(ms):
    """Example-weighted average of the workers' progressive metrics."""
    out = {}
    tot = sum(m.get("n", 0) for m in ms)
    if not tot:
        return ms[0] if ms else {}
    for k in ms[0]:
        v = ms[0][k]
        if k == "n":
            out[k] = tot
        elif isinstance(v, (int, float)):
            out[k] = sum(m.get(k, 0.0) * m.get("n", 0) for m in ms) / tot
    return out


#: refinement rounds per pass and worker of the default round length (:func:`default_passes_per_round`)
ROUNDS_PER_PASS_PER_WORKER = 20


#: new examples per worker of a streaming round when the stream's length is not known ahead (a file, a
#: Kafka topic), and the most a default streaming round takes
STREAM_ROUND_EXAMPLES = 500


def default_round_examples(workers, n=None):
    """The default streaming round of a job of ``workers`` workers, in new examples per worker:
    1 / (20 K) pass of a stream of known length ``n`` (an in-memory ``(X, Y)``), ceil(n / (20 K^2)),
    at most 500; 500 when the length is not known ahead (a file, a Kafka topic)."""
    if n is None:
        return STREAM_ROUND_EXAMPLES
    k = int(workers)
    return max(1, min(STREAM_ROUND_EXAMPLES, -(-int(n) // (ROUNDS_PER_PASS_PER_WORKER * k * k))))


def default_passes_per_round(workers):
    """The default refinement round length of a job of ``workers`` workers: 1 / (20 K) pass of the
    data held (n / (20 K) block steps of the union, n / (20 K^2) per worker, between two mixings).

    Rounds shorten as K grows so that the union of the workers' changes stays about as far behind
    one process at every K (RunOptions' ``passes_per_round`` gives the measurements)."""
    return 1.0 / (ROUNDS_PER_PASS_PER_WORKER * int(workers))


def _refine_round(passes_per_round, auto_rounds, history):
    """A refinement round's local passes: ``passes_per_round``; by default (``auto_rounds``) at least
    one block step for the worker holding the fewest blocks (a round of 1/(20 K) pass holds less than
    one step per worker once n < 20 K^2 examples: 10k letters at K = 32 then refined nothing at all)."""
    if not auto_rounds or not history:
        return passes_per_round
    least = min((w["n_blocks"] for w in history[-1]["workers"]), default=0)
    return max(passes_per_round, 1.0 / least) if least > 0 else passes_per_round


class RunOptions:
    """The configuration of a distributed :func:`run` (every field keyword-only).

    Parameters
    ----------
    task
        The engine task.
    workers, cluster
        Number of worker actors; ``"local"`` (start a private local Ray cluster unless Ray is
        already initialized -- also when another cluster runs on the machine), ``"auto"`` or ``"ray://host:port"``; ``"inprocess"``: no Ray, the workers
        and the mixer are plain objects in this process called in turn -- the same rounds and
        numbers as on Ray, for pass counts at many workers on a small machine, not for wall time
        (:mod:`streamssvm.distributed._inprocess`).
    checkpoint_dir
        Where the consistent cuts go (a directory every node can reach); a job started on a
        directory holding cuts resumes from the newest valid one.
    round_examples, round_seconds
        A round ends once each worker learned ``round_examples`` new examples (or after
        ``round_seconds``; 10 s by default for a live Kafka topic, so an idle partition does not
        hold a round open). None (default): :func:`default_round_examples` -- for an in-memory
        ``(X, Y)`` (its length known) a round is 1/(20 K) pass, ceil(n / (20 K^2)) new examples per
        worker, at most 500; for a file or a topic 500 per worker. Measured (in process, the
        refinement in rounds of 1/(20 K) pass): streaming rounds of 500 per worker instead of
        1/(20 K) pass cost 2,000 Brown sentences (40 tags, gap 0.1, averaging on) 7.54 passes
        instead of 6.96 at K = 4 (1.52x against 1.41x the single process: 500 per worker is the
        whole stream in one round there), 2,000 OCR words (gap 0.2) 8.44 / 8.36 instead of
        8.04 / 8.09 at K = 4 / 8, 10k OCR letters 4.0 instead of 3.81 at K = 8. Shorter
        streaming rounds cost throughput (a round is ~30 ms of mixing, certificate and cut on 2
        local workers), so a stream of unknown length keeps 500.
    passes, passes_per_round, tol
        After the stream: ``passes`` further passes over the held blocks, ``passes_per_round``
        of them per round, stopping early once the global gap <= ``tol``. A pass is n block
        steps summed over the workers: each worker takes ``passes_per_round`` local passes over
        its own blocks per round. None (default): ``1 / (20 K)``
        (:func:`default_passes_per_round`; a round is 1/(20 K) pass of the data held, n / (20 K)
        block steps of the union between two mixings, whatever K). Why it shrinks with K: K
        workers' changes made from the same start overlap more the longer they run apart, so
        the union falls behind one process unless its rounds shorten as K grows. Measured on 10k
        OCR letters (passes to a gap of 0.1, in process, averaging off; one process 3.35): rounds
        of 1/20 pass gave 1.10x / 1.33x / 1.63x the single process at K = 2 / 4 / 8, the defaults
        (stream and refinement in rounds of 1/(20 K) pass) 3.7 / 3.8 / 3.81 passes, 1.10x / 1.13x /
        1.14x (the old default of one local pass per refinement round: 1.49x / 2.09x / 3.28x);
        2,000 OCR words (gap 0.2) and 2,000 Brown sentences (gap 0.1), averaging on, within
        1.41x (bench/results/distributed.md). The
        price: 20 K rounds (mixings, certificates, cuts) per pass, each ~30 ms on 2 local
        workers -- raise ``snapshot_every`` / ``checkpoint_every`` to certify or cut less often.
    snapshot_every
        Rounds between two global certificates (always one at the end).
    checkpoint_every
        Rounds between two consistent cuts (and Kafka offset commits); always one when the
        stream ends and at the last round. A restart replays the rounds since the last cut.
    beta
        Mixing weight, 0 < beta <= K: ``new = start + (beta/K) sum_k delta_k``. BCFW solves the
        CoCoA+ local subproblem with sigma' = beta (see :mod:`streamssvm.distributed._bcfw`):
        1 is CoCoA averaging, K is CoCoA+ adding; the mixed point is dual-feasible for every
        beta. For SGD / MEMOIR, 1 is parameter averaging. None (default): K for BCFW (adding:
        measured 1.38x / 1.92x the single machine's passes to gap 0.1 at K = 2 / 4 on OCR
        letters, against 1.77x / 3.31x with 1; bench/results/distributed.md), 1 otherwise.
    mix_step
        ``"fixed"``: gamma = beta / K. ``"line"`` (BCFW): the mixer takes the gamma in [0, 1]
        that maximizes the dual of the union along the workers' combined step (exact line
        search; feasible for every gamma, derivation in :mod:`streamssvm.distributed._bcfw`).
        ``"adaptive"`` (BCFW; the default for it, None: adaptive for BCFW, fixed for SGD /
        MEMOIR parameter mixing): the line search's gamma, and the next round's sigma' set to
        1.25 times the measured overlap of the workers' changes (between 1 and K; the first round
        uses beta). Measured on 10k OCR letters in rounds of 0.05 pass: passes to gap 0.1 of
        1.10x / 1.33x / 1.63x the single process at K = 2 / 4 / 8 against 1.19x / 1.67x /
        2.66x with beta = K fixed (bench/results/distributed.md); short rounds matter more
        with it than with fixed mixing. Each round costs one sum of the held blocks' losses
        (the line search's input; the start's sum is carried over from the last round).
    async_cuts
        True: a cut's parts are snapshotted at the end of its round and written (encoded,
        fsynced, checksummed) by a background thread of each worker while the next round learns;
        the mixer commits the cut in a thread while the round after that learns, then the Kafka
        offsets of that cut are committed (with the next mixed weights). The last cut (stream end,
        last round) is written synchronously. A failure before a cut is committed restarts from
        the previous one, as for a synchronous cut. False (default): every cut is written and
        committed before the next round starts -- measured no slower on 2 x 5,000 OCR letters,
        where a round learns for ~15 ms, less than the writing it could hide
        (bench/results/distributed.md); on Brown chains (5,000 sentences, 472 tags, rounds of
        2 x 500, 61 MiB of weight sums) asynchronous cuts took the cuts' share of the job from
        28 s to 15 s (bench/results/distributed_wall.md, a loaded machine).
    incremental_cuts
        True (default): a worker's part holds only the chunks (4 KiB) of its large arrays -- the
        dual blocks' arenas, the weights -- that changed since its previous part, and names the
        older parts holding the rest (every 8th part, and the first after a restart, is whole);
        a cut is valid only when those verify too, and they are kept while a kept cut needs
        them (:class:`~streamssvm.distributed._cut.PartChunker`); an array whose changed 8-byte
        words take fewer bytes than their chunks (the weight sums: a round moves few entries
        spread over many rows) is written as a patch of those words. The mixer's state (the
        mixed weights, their average) is an incremental part of its own. False: every part
        whole, the mixer's state inside the cut.
    on_round
        ``on_round(record, job)`` after every round (tests use it to kill a worker); with
        ``async_cuts`` the round's own cut is still being written then.
    """

    params = (
        Param("task", None, "choice", "what the model learns",
              choices=("multiclass", "multilabel", "sequence", "extreme")),
        Param("workers", 2, "int", "worker actors", low=1),
        Param("cluster", "local", "str", "local, auto, ray://host:port, or inprocess (no Ray: the workers run in "
              "turn in this process)"),
        Param("checkpoint_dir", None, "object", "where the consistent cuts go"),
        Param("round_examples", None, "int", "new examples per worker and streaming round (None: 1/(20 workers) pass "
              "of an in-memory stream, at most 500; 500 for a file or a topic)", low=1, none=True),
        Param("round_seconds", None, "float", "seconds per round", low=0.0, low_open=True, none=True),
        Param("passes", 0.0, "float", "passes over the held blocks after the stream", low=0.0),
        Param("passes_per_round", None, "float", "of those passes per round (None: 1/(20 workers), a round is "
              "1/(20 K) pass of the data held)", low=0.0, low_open=True, none=True),
        Param("tol", None, "float", "stop refining once the global gap <= tol", low=0.0, none=True),
        Param("snapshot_every", 1, "int", "rounds between two global certificates", low=1),
        Param("checkpoint_every", 1, "int", "rounds between two consistent cuts", low=1),
        Param("beta", None, "float", "mixing weight, 0 < beta <= workers (None: workers for BCFW, 1 otherwise)",
              low=0.0, low_open=True, none=True),
        Param("mix_step", None, "choice", "BCFW mixing weight: fixed beta/K, an exact line search, or adaptive "
              "(sigma' from the measured overlap of the workers' changes, gamma by line search); None: adaptive "
              "for BCFW, fixed otherwise", choices=("fixed", "line", "adaptive"), none=True),
        Param("max_rounds", None, "int", "stop after this many rounds", low=0, none=True),
        Param("idle_timeout", None, "float", "a worker's shard ends after this many idle seconds", low=0.0,
              none=True),
        Param("max_restarts", 3, "int", "restarts from the last cut before giving up", low=0),
        Param("keep", 3, "int", "cuts kept", low=1),
        Param("metrics_path", None, "object", "JSONL file receiving one line per certified round"),
        Param("async_cuts", False, "bool", "write each cut while the next round learns"),
        Param("incremental_cuts", True, "bool", "a cut writes only the state chunks changed since the last one"),
        Param("on_round", None, "object", "callable(record, job) after every committed round", cli=False),
        Param("num_cpus", None, "int", "CPUs of a local Ray cluster", low=1, none=True),
        Param("progress", False, "bool", "print one line per round"),
        Param("dead_letter", None, "object", "kafka://HOST:PORT/TOPIC or JSONL file for the bad records (none: "
              "counted, kept in memory)"),
        Param("max_bad_fraction", None, "float", "stop when more than this fraction of the records are bad (from "
              "the 100th record on)", low=0.0, none=True),
    )

    def __init__(self, *, task, workers=2, cluster="local", checkpoint_dir=None, round_examples=None,
                 round_seconds=None, passes=0.0, passes_per_round=None, tol=None, snapshot_every=1,
                 checkpoint_every=1, beta=None, mix_step=None, max_rounds=None, idle_timeout=None, max_restarts=3,
                 keep=3,
                 metrics_path=None, async_cuts=False, incremental_cuts=True,
                 on_round=None, num_cpus=None, progress=False, dead_letter=None,
                 max_bad_fraction=None):
        values = locals()
        for p in self.params:   # stored unchanged; :func:`run` checks them (its messages)
            setattr(self, p.name, values[p.name])


def run(model, source, options=None, **kwargs):
    """Learn ``model`` from ``source`` with ``workers`` Ray actors and mixing rounds.

    Parameters
    ----------
    model
        A fresh estimator whose labels are declared (``labels=[...]``) and whose features share
        one index across workers (array inputs or ``n_features=2**k`` hashing); its learner is
        ``BCFW(...)`` (with ``averaging=True``, the default, the mixer averages the
        mixed points and the returned model predicts with that average) or ``SGD(...)``.
    source
        ``kafka://HOST:PORT/TOPIC?group=G&stop_at_end=true`` (partitions spread over the workers),
        a file path / URI (records k mod K to worker k), or a pair ``(X, Y)``.
    options, **kwargs
        A :class:`RunOptions`, or its fields as keywords (``task=...``, ``workers=...``, ...).

    Returns
    -------
    DistributedResult
    """
    if options is None:
        options = RunOptions(**kwargs)
    elif kwargs:
        raise TypeError("give either options or keyword arguments, not both")
    o = options
    task, workers, cluster, checkpoint_dir = o.task, o.workers, o.cluster, o.checkpoint_dir
    round_examples, round_seconds, passes, passes_per_round = o.round_examples, o.round_seconds, o.passes, \
        o.passes_per_round
    tol, snapshot_every, checkpoint_every, beta = o.tol, o.snapshot_every, o.checkpoint_every, o.beta
    max_rounds, idle_timeout, max_restarts, keep = o.max_rounds, o.idle_timeout, o.max_restarts, o.keep
    metrics_path, on_round, num_cpus, progress = o.metrics_path, o.on_round, o.num_cpus, o.progress
    if getattr(model, "scale", False):
        # each worker would learn its own running RMS of each column (streamssvm.scaling), and the
        # mixed weights would mix models of differently scaled features
        warnings.warn(f"distributed learning does not share feature-scaling statistics between workers: "
                      f"the {type(model).__name__} runs with scale=False (pass scale=False to say so; scale "
                      f"features of different scales ahead)", UserWarning, stacklevel=2)
        model = model.clone({"scale": False})
    if getattr(model, "normalize", False):   # MultiLabelSSVM's running row norm: the same reason
        warnings.warn(f"distributed learning does not share row-normalization statistics between workers: the "
                      f"{type(model).__name__} runs with normalize=False (pass normalize=False to say so)",
                      UserWarning, stacklevel=2)
        model = model.clone({"normalize": False})
    kind = learner_kind(model)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    window = getattr(model.learner, "window", None) if kind == "bcfw" else None
    if window is not None and int(window) < workers:
        raise ValueError(f"BCFW(window={window}) is shared by {workers} workers: every worker needs a window of at "
                         "least one block")
    if beta is None:   # CoCoA+ adding for dual (BCFW) mixing, averaging for parameter mixing
        beta = float(workers) if kind == "bcfw" else 1.0
    if not (0.0 < float(beta) <= workers):
        raise ValueError(f"beta must be in (0, workers] = (0, {workers}], got {beta!r}")
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be a positive int, got {checkpoint_every!r}")
    if model.labels is None:
        raise ValueError("distributed learning needs the labels declared up front (labels=[...]) so that every "
                         "worker numbers them alike")
    if round_examples is None:
        known = len(source[0]) if isinstance(source, tuple) and len(source) == 2 else None
        round_examples = default_round_examples(workers, known)
    if not isinstance(round_examples, int) or round_examples < 1:
        raise ValueError(f"round_examples must be a positive int, got {round_examples!r}")
    auto_rounds = passes_per_round is None
    if auto_rounds:
        passes_per_round = default_passes_per_round(workers)
    if not float(passes_per_round) > 0.0:
        raise ValueError(f"passes_per_round must be > 0, got {passes_per_round!r}")
    inprocess = cluster == "inprocess"
    started = False if inprocess else init_cluster(cluster, num_cpus=num_cpus)
    tmp = None
    if checkpoint_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="streamssvm-dist-")
        checkpoint_dir = tmp.name
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    idf = directory / "job_id"
    if not idf.exists():
        idf.write_text(uuid.uuid4().hex)
    job_id = idf.read_text().strip()
    cpus = float(workers) if inprocess else ray.cluster_resources().get("CPU", 1.0)
    shards = _source_spec(source, workers, inprocess)
    for spec in shards:
        spec["dead_letter"] = None if o.dead_letter is None else str(o.dead_letter)
    if round_seconds is None and shards[0]["kind"] == "kafka" and not shards[0]["stop_at_end"]:
        round_seconds = 10.0   # a live topic: an idle partition must not hold a round open forever
    mix_step = o.mix_step
    if mix_step is None:   # the measured best for a dual point; parameter mixing has only fixed
        mix_step = "adaptive" if kind == "bcfw" and workers > 1 else "fixed"   # 1 worker: the single run
    if mix_step not in ("fixed", "line", "adaptive"):
        raise ValueError(f"mix_step must be 'fixed', 'line' or 'adaptive', got {mix_step!r}")
    if mix_step != "fixed" and kind != "bcfw":
        raise ValueError(f"mix_step={mix_step!r} needs a dual point (BCFW); parameter mixing has none")
    job = _Job(model, shards, task, kind, workers, directory, keep,
               min(1.0, cpus / workers), job_id, mixing={"beta": beta, "step": mix_step}, inprocess=inprocess,
               cuts={"asynchronous": o.async_cuts, "incremental": o.incremental_cuts})
    restarts = 0
    history = []
    cert = None
    stopped = "done"
    try:
        job.start()
        refine_done = 0.0
        while True:
            streaming = not (history and history[-1]["ended"])
            if max_rounds is not None and job.round >= max_rounds:
                break
            if not streaming:
                if refine_done >= passes - 1e-12:
                    break
                if tol is not None and cert is not None and cert["gap"] <= tol:
                    break
            rp = 0.0 if streaming else min(_refine_round(passes_per_round, auto_rounds, history), passes - refine_done)
            certify = (job.round + 1) % max(int(snapshot_every), 1) == 0 or not streaming
            last = (max_rounds is not None and job.round + 1 >= max_rounds) or (
                not streaming and refine_done + rp >= passes - 1e-12)
            cut = (job.round + 1) % checkpoint_every == 0 or last
            try:
                rec = job.one_round(round_examples if streaming else 0, round_seconds, idle_timeout, rp, certify, cut,
                                    last)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError,
                    ray.exceptions.WorkerCrashedError) as e:
                restarts += 1
                if restarts > max_restarts:
                    raise RuntimeError(f"distributed job failed {restarts} times; last error: {e}") from e
                job.stop()
                cut = job.start()
                history = [h for h in history if h["round"] <= job.round]
                if job.round == 0:
                    history = []
                refine_done = sum(h["refine_passes"] for h in history)
                cert = next((h["certificate"] for h in reversed(history) if "certificate" in h), None)
                del cut
                continue
            if not streaming:
                refine_done += rp
            rec["restarts"] = restarts
            history.append(rec)
            if "certificate" in rec:
                cert = rec["certificate"]
            if metrics_path and "certificate" in rec:
                _append_metrics(metrics_path, rec)
            if progress:
                g = "-" if "gap" not in rec else f"{rec['gap']:.4g}"
                print(f"round {rec['round']} | examples {rec['examples_seen']} | blocks {rec['n_blocks']} | gap {g}",
                      flush=True)
            if on_round is not None:
                on_round(rec, job)
            if _too_many_bad(rec, o.max_bad_fraction):
                stopped = "too many bad records"
                break
        job.flush_cuts()
        if not history or "certificate" not in history[-1]:
            sums = job.get([w.block_sums.remote() for w in job.workers])
            cert = job.get(job.mixer.certificate.remote(sums))
        final = job.final_model()
        seen = history[-1]["examples_seen"] if history else 0
        wstats = history[-1]["workers"] if history else []
        return DistributedResult(model=final, certificate=cert, history=history, rounds=job.round,
                                 restarts=restarts, examples_seen=seen, workers=wstats,
                                 bad_records=history[-1].get("bad_records", 0) if history else 0, stopped=stopped)
    finally:
        try:
            job.get([w.close.remote() for w in job.workers], timeout=30)
        except Exception:  # noqa: BLE001 - best effort
            pass
        job.stop()
        if started:
            ray.shutdown()
        if tmp is not None:
            tmp.cleanup()


def _too_many_bad(rec, fraction, min_records=100):
    """Whether a round's totals pass ``max_bad_fraction`` (checked from ``min_records`` on)."""
    if fraction is None:
        return False
    bad = rec.get("bad_records", 0)
    total = bad + rec["examples_seen"]
    return total >= min_records and bad > fraction * total


def _append_metrics(path, rec):
    """One line per certified round, in the engine's snapshot format plus the per-worker part."""
    import json
    import math
    c = rec["certificate"]
    line = {"examples_seen": rec["examples_seen"], "time": rec["time"], "gap": c["gap"], "primal": c["primal"],
            "dual": c["dual"], "n_blocks": c["n_blocks"], "exact": c["exact"],
            "certificate_seconds": c["seconds"], "round": rec["round"], "distributed": True,
            "workers": [{"worker": w["worker"], "examples_seen": w["examples_seen"], "throughput": w["throughput"],
                         "n_blocks": w["n_blocks"]} for w in rec["workers"]], **rec["metrics"]}
    from ..connectors.base import append_line
    append_line(path, json.dumps(line, default=lambda v: None if isinstance(v, float) and not math.isfinite(v)
                                 else str(v)))


__all__ = ["DistributedResult", "RunOptions", "default_passes_per_round", "default_round_examples", "init_cluster",
           "run", "runtime_env", "Certificate"]
