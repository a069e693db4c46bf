"""The mixer: combines the workers' weight changes, computes the global certificate, commits
the consistent cut of every round (plain Python: :mod:`._ray` runs it as a Ray actor)."""
from __future__ import annotations

import threading
import time

import numpy as np

from ..certificate import Certificate
from ..errors import CheckpointError
from ._cut import CutStore
from ._mix import average_step, combine, union_lam
from ._sparse import Changes, combine_packed, unpack
from ._bcfw import average_weight, line_step, overlap, power_sum


#: job kinds of files written before MEMOIR declared its mixing (``Learner.mixing``)
_LEGACY_KINDS = {"memoir": "ipm"}


#: adaptive mixing's safety factor on the measured overlap: sigma' = 1.25 rho of the last round
#: (tuned on 10k OCR letters, lambda = 0.01, K = 4 / 8, rounds of 0.05 pass: 1.0 -> 4.9 / 6.0
#: passes to gap 0.1, 1.25 -> 4.45 / 5.45, 1.5 -> 5.55 at K = 8; 0.7 -> 7.2 at K = 8)
ADAPTIVE_MARGIN = 1.25

#: the margin when the mixer averages the mixed points (``BCFW(averaging=True)``, the default): the
#: model predicts with and is certified by the average, which smooths the iterate's primal
#: oscillations that the margin above pays damping against, so sigma' follows the overlap
#: itself, sigma' = clip(rho, 1, K) (measured in process, averaging on, rounds of 1/(20 K) pass,
#: passes to the averaged weights' gap: see bench/results/distributed_averaging_chains.md)
ADAPTIVE_MARGIN_AVERAGED = 1.0

#: the mixer's average weighs the steps by t^AVERAGE_POWER with several workers (t with one: the
#: single process's weights; see :mod:`._bcfw`, "Averaging at the mixer")
AVERAGE_POWER = 2


class Mixer:
    """Global state of a distributed job: the mixed weights (``start`` of the next round), the
    global number of blocks, the round id, the per-round history.

    >>> import numpy as np, tempfile
    >>> m = Mixer(2, "ipm", lam=0.1, beta=1.0, directory=tempfile.mkdtemp())
    >>> out = m.mix(1, [5, 5], {"E": np.ones((2, 2))}, {"E": 3 * np.ones((2, 2))})
    >>> out["changes"].apply({})["E"].tolist()     # parameter mixing: the average
    [[2.0, 2.0], [2.0, 2.0]]
    """

    def __init__(self, n_workers, kind, lam, beta=1.0, directory=None, keep=3, line_search=False,
                 adaptive=False, averaging=False, incremental_cuts=True):
        self.n_workers = int(n_workers)
        # adaptive (BCFW): the next round's sigma' is this round's measured overlap of the workers'
        # changes, and gamma comes from the exact line search (see :mod:`._bcfw`)
        self.adaptive = bool(adaptive) and kind == "bcfw"
        self.line_search = (bool(line_search) or self.adaptive) and kind == "bcfw"
        self.sigma = float(beta)
        self.kind = kind
        self.lam = None if lam is None else float(lam)   # None: lambda follows n (union_lam)
        self.gamma = float(beta) / self.n_workers
        self.start = {}
        self.n_global = 0
        self.round = 0
        self.history = []
        # BCFW(averaging=True): the step-weighted average of the mixed points (see :mod:`._bcfw`,
        # "Averaging at the mixer"): T steps of the union, W_T, U_bar, L_bar; in every cut
        self.averaging = bool(averaging) and kind == "bcfw"
        self.average_power = 1 if self.n_workers == 1 else AVERAGE_POWER
        self.average = self._no_average() if self.averaging else None
        self.restarted_average = False   # the restored cut held no average (see _restore_average)
        # incremental_cuts: the mixer's state goes into each cut as an incremental part of its own
        self.cuts = CutStore(directory, keep=keep, incremental=incremental_cuts) if directory is not None else None
        self._staged = {}         # round -> (mixer state, meta) of an asynchronous cut
        self._committing = None   # the staged cut being committed by a background thread

    # ------------------------------------------------------------------ state
    @staticmethod
    def _no_average():
        return {"T": 0, "W": 0.0, "U": {}, "L": 0.0, "L_now": 0.0}

    def state(self):
        st = {"start": dict(self.start), "n_global": self.n_global, "round": self.round,
              "history": list(self.history), "kind": self.kind, "n_workers": self.n_workers, "sigma": self.sigma}
        if self.average is not None:
            a = self.average
            st["average"] = {"T": int(a["T"]), "W": float(a["W"]), "L": float(a["L"]), "L_now": float(a["L_now"]),
                             "U": {k: np.array(v, copy=True) for k, v in a["U"].items()},
                             "power": int(self.average_power)}
        return st

    def _restore_average(self, m):
        """The average of a cut's mixer state; a cut written without one (a job run with
        averaging=False, or before the mixer averaged) starts the average at its round, as an
        eviction restarts it (``restarted_average`` tells the driver, which warns)."""
        self.restarted_average = False
        if not self.averaging:
            return
        a = m.get("average")
        if a is None:
            self.average = self._no_average()
            self.restarted_average = int(m["round"]) > 0
            return
        T, W, L, L_now = int(a["T"]), float(a["W"]), float(a["L"]), float(a["L_now"])
        U = {k: np.asarray(v, dtype=np.float64) for k, v in a["U"].items()}
        # the weights the average was taken with (cuts written before the power was saved: t)
        power = a.get("power", 1)
        if power not in (1, 2):
            raise CheckpointError(f"invalid mixer average in the cut: step weights t^{power!r}")
        # W sums the step weights S_p(T_r) - S_p(T_(r-1)) since the average (re)started
        if T < 0 or not 0.0 <= W <= power_sum(T, power) * (1.0 + 1e-9):
            raise CheckpointError(f"invalid mixer average in the cut: {T} steps with weight {W!r}")
        self.average_power = int(power)   # a resumed job keeps its average's weights
        if not (np.isfinite(L) and np.isfinite(L_now) and all(np.all(np.isfinite(u)) for u in U.values())):
            raise CheckpointError("invalid mixer average in the cut: non-finite weight or loss sums")
        self.average = {"T": T, "W": W, "L": L, "L_now": L_now, "U": U}

    def restore(self):
        """Load the newest valid cut: returns ``{"round", "parts", "n_global"}`` or None."""
        got = self.cuts.latest() if self.cuts is not None else None
        if got is None:
            return None
        st, path = got
        m = st["mixer"]
        if _LEGACY_KINDS.get(m["kind"], m["kind"]) != self.kind:
            raise ValueError(f"the checkpoint directory holds a job of {m['kind']} workers, not {self.kind} "
                             "workers; use a fresh checkpoint directory")
        if int(m["n_workers"]) != self.n_workers:
            raise ValueError(f"the checkpoint directory holds a job of {m['n_workers']} workers, not "
                             f"{self.n_workers}: only a job on a Kafka topic can change its number of workers")
        self.start = {k: np.asarray(v, dtype=np.float64) for k, v in m["start"].items()}
        self.n_global = int(m["n_global"])
        self.round = int(m["round"])
        self.history = list(m["history"])
        self.sigma = float(m.get("sigma", self.sigma))
        self._restore_average(m)
        return {"round": self.round, "parts": st["parts"], "n_global": self.n_global, "path": str(path),
                "restarted_average": self.restarted_average}

    def regroup(self, partitions):
        """Resume a Kafka job with a different number of workers: the newest cut's dual blocks
        move with their partitions. ``partitions[k]`` are the partitions of new worker k. Writes
        one part per new worker and commits a new cut of the same round; returns like
        :meth:`restore` (None when there is no cut)."""
        from ..checkpoint import save_state
        from ..metrics import ProgressiveMetrics
        from . import _bcfw
        from ._cut import PART_KIND, file_sha256, load_part
        got = self.cuts.latest() if self.cuts is not None else None
        if got is None:
            return None
        st, _ = got
        m = st["mixer"]
        if int(m["n_workers"]) == self.n_workers:
            return self.restore()
        if _LEGACY_KINDS.get(m["kind"], m["kind"]) != self.kind:
            raise ValueError(f"the checkpoint directory holds a job of {m['kind']} workers, not {self.kind} workers")
        old = [load_part(p["path"], kind=PART_KIND)[0] for p in sorted(st["parts"], key=lambda p: p["worker"])]
        topic, offsets = None, {}
        for o in old:
            pos = o["worker"]["position"]
            if pos is None:
                continue
            if not isinstance(pos, dict) or "offsets" not in pos:
                raise ValueError(f"the job was checkpointed with {m['n_workers']} workers on a file or in-memory "
                                 f"source; resume it with {m['n_workers']} workers")
            topic = pos["topic"]
            offsets.update({int(p): int(v) for p, v in pos["offsets"].items()})
        self.start = {k: np.asarray(v, dtype=np.float64) for k, v in m["start"].items()}
        self.n_global = int(m["n_global"])
        self.round = int(m["round"])
        self.history = list(m["history"])
        self._restore_average(m)
        models = [o["model"] for o in old]
        base = next((md for md in models if md.get("learner") is not None), models[0])
        owner = None
        if self.kind == "bcfw":
            learners, part_of = [], []
            for o in old:
                ls = o["model"].get("learner")
                if ls is None:
                    continue
                learners.append(ls)
                order = _bcfw.slot_order(ls)
                bp = np.asarray(o["worker"].get("block_partitions", []), dtype=np.int64)
                if len(bp) != len(order):
                    raise ValueError("a part does not record the partition of each of its blocks")
                by_slot = np.full(int(ls["store"]["n_slots"]), -1, dtype=np.int64)
                by_slot[order] = bp
                part_of.append(by_slot)
            if learners:
                union = _bcfw.merge_learner_states(learners, self.start)
                owner = np.concatenate(part_of)
                union_order = _bcfw.slot_order(union)
        parts = []
        for k, parts_k in enumerate(partitions):
            mine = {int(p) for p in parts_k}
            model = dict(base)
            bps = []
            if owner is not None:
                slots = [int(j) for j in union_order if int(owner[j]) in mine]
                model["learner"] = _bcfw.select_blocks(union, slots)
                bps = [int(owner[j]) for j in slots]
            n_k = len(bps) if owner is not None else 0
            w = {"index": k, "round": self.round, "examples_seen": n_k, "bad_records": 0,
                 "metrics": ProgressiveMetrics(old[0]["worker"]["metrics"]["task"]).state(),
                 "n_global": self.n_global, "ended": False, "learn_seconds": 0.0, "learn_cpu": 0.0,
                 "position": ({"topic": topic, "offsets": {str(p): offsets[p] for p in sorted(mine) if p in offsets}}
                              if topic is not None else None),
                 "block_partitions": np.asarray(bps, dtype=np.int64)}
            path = self.cuts.part_path(self.round, k).with_name(f"regroup-{self.n_workers}-worker-{k:04d}.ssvm")
            save_state(path, {"model": model, "worker": w}, kind=PART_KIND,
                       meta={"worker": k, "round": self.round, "regroup": True})
            parts.append({"worker": k, "path": str(path), "sha256": file_sha256(path)})
        self.cuts.commit(self.round, parts, self.state(), meta={"regroup_from": int(m["n_workers"])})
        return self.restore()

    def part_path(self, round_id, worker):
        return str(self.cuts.part_path(round_id, worker))

    # ------------------------------------------------------------------ rounds
    def mix(self, round_id, n_blocks, *deltas, loss_deltas=None, totals=None):
        """``start + gamma sum_k delta_k`` with gamma = beta/K, or with ``line_search`` the best
        gamma in [0, 1] for the dual of the union (BCFW, from the workers' ``loss_deltas``; see
        :func:`streamssvm.distributed._bcfw.line_step`); returns the mixed weights to broadcast
        (``"changes"``: the entries that moved since the last mixed point,
        :class:`~streamssvm.distributed._sparse.Changes`; :meth:`weights` is the whole point)
        and the gamma the workers blend their blocks with (the deltas are separate arguments so
        that Ray hands the workers' objects over directly). With ``adaptive`` the next round's
        sigma' = clip(margin rho, 1, K) from this round's overlap rho (``ADAPTIVE_MARGIN``, or
        ``ADAPTIVE_MARGIN_AVERAGED`` when the mixer averages)
        (:func:`streamssvm.distributed._bcfw.overlap`), returned with the weights. With
        ``averaging``, ``totals`` (each worker's ``{"steps", "loss_start"}``) move the average
        of the mixed points (:meth:`_average`)."""
        n = int(sum(n_blocks))
        gamma = self.gamma
        # the workers send their deltas sparse (._sparse.pack): dense again here, and mixed by the
        # same operations in the same order as dense deltas (the same bits)
        packed, deltas = list(deltas), [unpack(d) for d in deltas]
        # blocks the workers evicted leave the union's sums whole: U^0 - sum_k R_k (see ._bcfw,
        # "Eviction windows per worker"); the held blocks' changes are blended
        removed = [t["removed"] for t in (totals or []) if t.get("removed")]
        base = combine(self.start, removed, -1.0) if removed else self.start
        if self.line_search and loss_deltas is not None and None not in loss_deltas:
            S = combine_packed({}, packed, 1.0)   # = combine({}, deltas, 1.0)
            gamma = line_step(base, S, float(sum(loss_deltas)), union_lam(self.lam, n), n, self.gamma)
        rho = overlap(list(deltas)) if self.kind == "bcfw" else None
        if self.adaptive and rho is not None:
            margin = ADAPTIVE_MARGIN_AVERAGED if self.averaging else ADAPTIVE_MARGIN
            self.sigma = float(min(max(margin * rho, 1.0), self.n_workers))
        previous, base_round = self.start, self.round
        self.start = combine_packed(base, packed, gamma)   # = combine(base, deltas, gamma), bit for bit
        self.n_global = n
        self.round = int(round_id)
        # the broadcast: the entries where the mixed point moved since the last one, which every
        # worker holds (a worker that does not gets the whole point, Worker.apply's ``whole``)
        changes = Changes.between(previous, self.start, base_round, self.round)
        out = {"round": self.round, "n_global": self.n_global, "changes": changes, "gamma": gamma,
               "sigma": self.sigma, "overlap": rho, "bytes": changes.nbytes,
               "bytes_whole": int(sum(a.nbytes for a in self.start.values()))}
        if self.average is not None:
            # how the average moved (restart, then U_bar += f (U^(r) - U_bar)): the workers repeat
            # it on the broadcast weights to predict with the same U_bar (see Worker.follow_average)
            out["average_step"] = self._average(totals, loss_deltas, gamma)
        return out

    def _average(self, totals, loss_deltas, gamma):
        """U_bar += (c_r / W_T) (U^(r) - U_bar) (and L_bar alike) with c_r the sum of the step
        indices of this round's steps, or of their squares with several workers
        (``_bcfw.average_weight`` with ``average_power``); U^(r) the mixed sums, L^(r) the
        union's loss sum after the blend. Returns ``{"restart", "f"}``: whether the average
        restarted (an eviction) and the factor f = c_r / W_T it moved by (0: not moved)."""
        if totals is None or loss_deltas is None or None in loss_deltas \
                or any(t.get("loss_start") is None for t in totals):
            raise RuntimeError("averaging at the mixer needs every worker's steps and loss sums")
        a = self.average
        restart = any(int(t.get("evicted") or 0) for t in totals)
        if restart:
            # an eviction restarts the averaging window (one process's evicted_average="restart")
            a.update(self._no_average())
        T = int(a["T"]) + int(sum(int(t["steps"]) for t in totals))
        a["L_now"] = float(sum(float(t["loss_start"]) for t in totals) + gamma * float(sum(loss_deltas)))
        c = average_weight(a["T"], T, self.average_power) if T > a["T"] else 0.0
        f = 0.0
        if c > 0.0:
            W = a["W"] + c
            f = c / W
            a["U"] = average_step(a["U"], self.start, f)
            a["L"] += f * (a["L_now"] - a["L"])
            a["W"] = W
        a["T"] = T
        return {"restart": bool(restart), "f": float(f)}

    def averaged(self):
        """The mixer's average ``{"T", "W", "U", "L", "L_now"}`` (None without averaging)."""
        return None if self.average is None else self.state()["average"]

    def certificate(self, sums):
        """The global certificate at the mixed weights from the workers' block sums."""
        t0 = time.perf_counter()
        n = int(sum(s["n"] for s in sums))
        calls = int(sum(s["oracle_calls"] for s in sums))
        secs = max((s.get("seconds", 0.0) for s in sums), default=0.0)
        lam = union_lam(self.lam, n)
        if n == 0:
            return Certificate.empty(lam).to_dict()
        if self.kind == "bcfw":
            sq = sum(float(np.vdot(self.start[k], self.start[k])) for k in ("E", "T", "B") if k in self.start)
            scale = 1.0 / (lam * n)
            reg = 0.5 * lam * scale * scale * sq
            hinge = sum(s["hinge_sum"] for s in sums) / n
            dual_loss = sum(s["loss_sum"] for s in sums) / n
            bgs = sum(s["gap_sum"] for s in sums) / n
            primal, dual = reg + hinge, dual_loss - reg
            raw = primal - dual
            c = Certificate(gap=max(raw, 0.0), primal=primal, dual=dual, n_blocks=n, oracle_calls=calls,
                            seconds=secs + time.perf_counter() - t0, exact=all(s["exact"] for s in sums),
                            lam=lam, regularizer=reg, hinge=hinge, dual_loss=dual_loss, block_gap_sum=bgs,
                            note=f"distributed: sum of the block gaps of {len(sums)} workers at the mixed weights"
                                 + (" (the iterate; the model predicts with the mixer's average, certified by its "
                                    "own certificate())" if self.averaging else ""),
                            extra={"raw_gap": raw, "workers": len(sums)})
        else:
            hinge = sum(s["hinge_sum"] for s in sums) / n
            reg = float(sums[0].get("regularizer", 0.0))
            c = Certificate(gap=float("inf"), primal=reg + hinge, dual=float("-inf"), n_blocks=n,
                            oracle_calls=calls, seconds=secs + time.perf_counter() - t0, exact=False,
                            lam=lam, regularizer=reg, hinge=hinge,
                            note="parameter mixing keeps no dual point of the union: primal objective on the "
                                 "workers' windows only",
                            extra={"workers": len(sums)})
        return c.to_dict()

    def commit(self, round_id, parts, record):
        """Commit the cut of ``round_id`` (every part durable and verified) with the round record."""
        self.wait_commit()
        self.history.append(record)
        path = self.cuts.commit(round_id, parts, self.state(), meta={"examples_seen": record.get("examples_seen")})
        return str(path)

    def stage(self, round_id, record):
        """An asynchronous cut of ``round_id``: snapshot the mixer's state now (the round record
        joins the history); :meth:`commit_staged` commits it once the workers' parts are written,
        while the following rounds run."""
        self.history.append(record)
        st = self.state()
        st["start"] = {k: np.array(v, copy=True) for k, v in st["start"].items()}   # (state() copies the average)
        self._staged[int(round_id)] = (st, {"examples_seen": record.get("examples_seen")})
        return True

    def commit_staged(self, round_id, parts):
        """Commit the staged cut of ``round_id`` in a background thread (verify every part, write
        the cut, rename it into place); :meth:`wait_commit` joins it. Returns at once."""
        self.wait_commit()
        st, meta = self._staged.pop(int(round_id))
        self._staged = {r: v for r, v in self._staged.items() if r > int(round_id)}
        job = {"round": int(round_id), "path": None, "error": None, "seconds": 0.0}

        def write():
            t0 = time.perf_counter()
            try:
                job["path"] = str(self.cuts.commit(round_id, parts, st, meta=meta))
            except BaseException as e:  # noqa: BLE001 - raised again by wait_commit
                job["error"] = e
            job["seconds"] = time.perf_counter() - t0

        job["thread"] = threading.Thread(target=write, name=f"cut-commit-{round_id}", daemon=True)
        job["thread"].start()
        self._committing = job
        return True

    def wait_commit(self):
        """Wait for the cut being committed (if any): ``{"round", "path", "seconds"}`` or None;
        raises what the commit raised (the cut then does not exist)."""
        job, self._committing = self._committing, None
        if job is None:
            return None
        job["thread"].join()
        if job["error"] is not None:
            raise job["error"]
        return {"round": job["round"], "path": job["path"], "seconds": job["seconds"]}

    def note(self, record):
        """A round without a cut: its record joins the history of the next cut."""
        self.history.append(record)
        return True

    def weights(self):
        return dict(self.start)
