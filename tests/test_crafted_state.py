"""The crafted-state suite: for every learner x structure, every integer array of a saved model
set to its dtype's max, to -1 and emptied, every number (settings included) set to 2**31, -1,
NaN and inf, each restored and used (predict, learn, certify, refine, save, reload) in a
subprocess with a deadline: no signal death, no hang, no non-finite weights.

One subprocess per learner x structure loops over its mutations (``crafted_state_worker.py``,
which logs each mutation before touching it); when it dies or hangs, the mutation in flight is
recorded and a new subprocess goes on after it. Kernels are compiled once (the on-disk cache).

``python tests/test_crafted_state.py`` prints the table of outcomes (run it with another
``PYTHONPATH`` to count another checkout's failures).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("crafted_state_worker.py")
DEADLINE = 20.0      # seconds one mutation may take (a hang is any longer)

CASES = [("BCFW", "multiclass"), ("BCFW", "multilabel"), ("BCFW", "mrf"), ("BCFW", "hierarchy"), ("BCFW", "chain"),
         ("SGD", "multiclass"), ("SGD", "mrf"), ("SGD", "chain"),
         ("MEMOIR", "extreme"),
         ("GDMM", "mrf"), ("GDMM", "chain"),
         ("BMRM", "multiclass"), ("BMRM", "mrf"), ("BMRM", "chain"),
         ("Pragam", "multiclass"),
         ("CuttingPlane", "multiclass"), ("CuttingPlane", "mrf"), ("CuttingPlane", "chain"),
         # variants whose state holds more: a per-block cache, a reservoir, an index, a slack search
         ("BCFW:cache=true,step=pairwise", "chain"), ("BCFW:eviction=reservoir", "multiclass"),
         ("SGD:rescaling=slack,search=angular", "chain"), ("MEMOIR:mips=hnsw", "extreme"),
         ("MEMOIR:mips=lsh,variant=l1", "extreme"), ("CuttingPlane:eviction=reservoir", "multiclass"),
         ("BMRM:variant=ls,rescaling=slack", "multilabel")]


def _env():
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["NUMBA_NUM_THREADS"] = "1"
    return env


def _read(log):
    started, outcomes = {}, {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("start"):
                started[r["i"]] = r["name"]
            else:
                outcomes[r["i"]] = (r["name"], r["outcome"])
    return started, outcomes


def run_case(learner, case, deadline=DEADLINE):
    """``{mutation index: (name, outcome)}`` of one learner x structure; outcomes as the worker
    writes them, plus ``signal:<n>`` / ``exit:<n>`` (the process died in it) and ``hang``."""
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "log.jsonl"
        start = 0
        results = {}
        while True:
            p = subprocess.Popen([sys.executable, str(WORKER), learner, case, str(start), str(log)],
                                 env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            last, t_last = None, time.monotonic()
            while p.poll() is None:
                time.sleep(0.1)
                started, outcomes = _read(log)
                inflight = max((i for i in started if i not in outcomes), default=None)
                if inflight != last:
                    last, t_last = inflight, time.monotonic()
                elif inflight is not None and time.monotonic() - t_last > deadline:
                    p.kill()
                    p.wait()
                    break
                elif inflight is None and time.monotonic() - t_last > 10 * deadline:
                    p.kill()   # stuck before the first mutation: building the model
                    p.wait()
                    raise RuntimeError(f"{learner} x {case}: the worker never started")
            err = p.stderr.read().decode(errors="replace")
            p.stderr.close()
            started, outcomes = _read(log)
            results.update(outcomes)
            inflight = [i for i in started if i not in outcomes]
            if p.returncode == 0 and not inflight:
                return results
            if not inflight:
                raise RuntimeError(f"{learner} x {case}: worker failed outside a mutation:\n{err[-2000:]}")
            i = max(inflight)
            rc = p.returncode
            how = "hang" if rc in (-9,) and time.monotonic() - t_last > deadline else (
                f"signal:{-rc}" if rc < 0 else f"exit:{rc}")
            results[i] = (started[i], how)
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"i": i, "name": started[i], "outcome": how}) + "\n")
            start = i + 1


def failures(results):
    """The mutations that died, hung or left non-finite weights."""
    return {i: r for i, r in results.items()
            if r[1] == "nan" or r[1] == "hang" or r[1].startswith(("signal:", "exit:"))}


@pytest.mark.parametrize("learner,case", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_crafted_states_never_crash_hang_or_nan(learner, case):
    results = run_case(learner, case)
    assert results
    bad = failures(results)
    assert not bad, "\n".join(f"{name}: {how}" for name, how in sorted(bad.values()))


def _table(cases):
    print(f"{'case':28s} {'tried':>6s} {'refused':>8s} {'ok':>5s} {'late':>5s} {'crash':>6s} {'hang':>5s} {'nan':>5s}")
    tot = [0] * 7
    for learner, case in cases:
        t0 = time.time()
        r = run_case(learner, case)
        outs = [o for _, o in r.values()]
        row = [len(outs), sum(o == "refused" for o in outs), sum(o == "ok" for o in outs),
               sum(o.startswith("late") for o in outs),
               sum(o.startswith(("signal:", "exit:")) for o in outs), sum(o == "hang" for o in outs),
               sum(o == "nan" for o in outs)]
        tot = [a + b for a, b in zip(tot, row)]
        print(f"{learner + ' x ' + case:28s} " + " ".join(f"{v:>{w}d}" for v, w in zip(row, (6, 8, 5, 5, 6, 5, 5)))
              + f"   ({time.time() - t0:.0f} s)", flush=True)
        for name, o in sorted(r.values()):
            if o == "nan" or o == "hang" or o.startswith(("signal:", "exit:", "late")):
                print(f"    {name}: {o}", flush=True)
    print(f"{'total':28s} " + " ".join(f"{v:>{w}d}" for v, w in zip(tot, (6, 8, 5, 5, 6, 5, 5))))


if __name__ == "__main__":
    sel = [c for c in CASES if not sys.argv[1:] or c[0].split(":")[0] in sys.argv[1:]
           or f"{c[0]}-{c[1]}" in sys.argv[1:]]
    _table(sel)
