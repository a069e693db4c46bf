"""The mixer: combines the workers' weight changes, computes the global certificate, commits
the consistent cut of every round (plain Python: :mod:`._ray` runs it as a Ray actor)."""
from __future__ import annotations

import time

import numpy as np

from ..certificate import Certificate
from ._cut import CutStore
from ._mix import combine


class Mixer:
    """Global state of a distributed job: the mixed weights (``start`` of the next round), the
    global number of blocks, the round id, the per-round history.

    >>> import numpy as np, tempfile
    >>> m = Mixer(2, "ipm", lam=0.1, beta=1.0, directory=tempfile.mkdtemp())
    >>> out = m.mix(1, [5, 5], {"E": np.ones((2, 2))}, {"E": 3 * np.ones((2, 2))})
    >>> out["weights"]["E"].tolist()     # parameter mixing: the average
    [[2.0, 2.0], [2.0, 2.0]]
    """

    def __init__(self, n_workers, kind, lam, beta=1.0, directory=None, keep=3):
        self.n_workers = int(n_workers)
        self.kind = kind
        self.lam = float(lam)
        self.gamma = float(beta) / self.n_workers
        self.start = {}
        self.n_global = 0
        self.round = 0
        self.history = []
        self.cuts = CutStore(directory, keep=keep) if directory is not None else None

    # ------------------------------------------------------------------ state
    def state(self):
        return {"start": dict(self.start), "n_global": self.n_global, "round": self.round,
                "history": list(self.history), "kind": self.kind, "n_workers": self.n_workers}

    def restore(self):
        """Load the newest valid cut: returns ``{"round", "parts", "n_global"}`` or None."""
        got = self.cuts.latest() if self.cuts is not None else None
        if got is None:
            return None
        st, path = got
        m = st["mixer"]
        if int(m["n_workers"]) != self.n_workers or m["kind"] != self.kind:
            raise ValueError(f"the checkpoint directory holds a job of {m['n_workers']} {m['kind']} workers, "
                             f"not {self.n_workers} {self.kind} workers; use a fresh --checkpoint-dir")
        self.start = {k: np.asarray(v, dtype=np.float64) for k, v in m["start"].items()}
        self.n_global = int(m["n_global"])
        self.round = int(m["round"])
        self.history = list(m["history"])
        return {"round": self.round, "parts": st["parts"], "n_global": self.n_global, "path": str(path)}

    def part_path(self, round_id, worker):
        return str(self.cuts.part_path(round_id, worker))

    # ------------------------------------------------------------------ rounds
    def mix(self, round_id, n_blocks, *deltas):
        """``start + (beta/K) sum_k delta_k``; returns the mixed weights to broadcast (the deltas
        are separate arguments so that Ray hands the workers' objects over directly)."""
        self.start = combine(self.start, list(deltas), self.gamma)
        self.n_global = int(sum(n_blocks))
        self.round = int(round_id)
        return {"round": self.round, "n_global": self.n_global, "weights": self.start,
                "bytes": int(sum(a.nbytes for a in self.start.values()))}

    def certificate(self, sums):
        """The global certificate at the mixed weights from the workers' block sums."""
        t0 = time.perf_counter()
        n = int(sum(s["n"] for s in sums))
        calls = int(sum(s["oracle_calls"] for s in sums))
        secs = max((s.get("seconds", 0.0) for s in sums), default=0.0)
        if n == 0:
            return Certificate(0.0, 0.0, 0.0, 0, 0, 0.0, True, self.lam, note="no examples held").to_dict()
        if self.kind == "bcfw":
            sq = sum(float(np.vdot(self.start[k], self.start[k])) for k in ("E", "T", "B") if k in self.start)
            scale = 1.0 / (self.lam * n)
            reg = 0.5 * self.lam * scale * scale * sq
            hinge = sum(s["hinge_sum"] for s in sums) / n
            dual_loss = sum(s["loss_sum"] for s in sums) / n
            bgs = sum(s["gap_sum"] for s in sums) / n
            primal, dual = reg + hinge, dual_loss - reg
            raw = primal - dual
            c = Certificate(gap=max(raw, 0.0), primal=primal, dual=dual, n_blocks=n, oracle_calls=calls,
                            seconds=secs + time.perf_counter() - t0, exact=all(s["exact"] for s in sums),
                            lam=self.lam, regularizer=reg, hinge=hinge, dual_loss=dual_loss, block_gap_sum=bgs,
                            note=f"distributed: sum of the block gaps of {len(sums)} workers at the mixed weights",
                            extra={"raw_gap": raw, "workers": len(sums)})
        else:
            hinge = sum(s["hinge_sum"] for s in sums) / n
            reg = float(sums[0].get("regularizer", 0.0))
            c = Certificate(gap=float("inf"), primal=reg + hinge, dual=float("-inf"), n_blocks=n,
                            oracle_calls=calls, seconds=secs + time.perf_counter() - t0, exact=False,
                            lam=self.lam, regularizer=reg, hinge=hinge,
                            note="parameter mixing keeps no dual point of the union: primal objective on the "
                                 "workers' windows only",
                            extra={"workers": len(sums)})
        return c.to_dict()

    def commit(self, round_id, parts, record):
        """Commit the cut of ``round_id`` (every part durable and verified) with the round record."""
        self.history.append(record)
        path = self.cuts.commit(round_id, parts, self.state(), meta={"examples_seen": record.get("examples_seen")})
        return str(path)

    def note(self, record):
        """A round without a cut: its record joins the history of the next cut."""
        self.history.append(record)
        return True

    def weights(self):
        return dict(self.start)
