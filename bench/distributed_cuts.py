"""Per-round overhead of distributed BCFW with synchronous and asynchronous consistent cuts.

    flock /tmp/bench.lock nice -n 0 python3 bench/distributed_cuts.py [--repeats 2]

Protocol: 2 Ray workers x 5,000 OCR letters (the first 10,000 training letters, k mod 2),
lam = 0.01, replay 0; 4 stream rounds of 1,250 letters per worker, then 8 refinement rounds of
0.25 local pass (`--local-passes`); certificate and consistent cut every round. The same job runs with
``async_cuts=False`` (every cut written, fsynced, verified and committed before the next round)
and ``async_cuts=True`` (parts snapshotted at the end of a round, written by a thread of each
worker while the next round learns, committed by the mixer after it), alternating, on one local
Ray cluster. Per round (median over rounds, mean over repeats): the driver's wall split (learn,
mix, certificate, cut on the critical path), the mixer's commit of a cut (verify the parts,
write the cut; asynchronous: in a thread while the round after next learns), the workers' part write split (snapshot, encode,
write, fsync, checksum; in the background when asynchronous), the workers' CPU. Prints a
markdown table; nothing is written to bench/results (paste it by hand: bench/results/distributed_cuts.md).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import ray  # noqa: E402

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from _common import ocr_letters  # noqa: E402


MODES = {"synchronous, whole": (False, False), "asynchronous, whole": (True, False),
         "synchronous, incremental": (False, True), "asynchronous, incremental": (True, True)}


def job(X, Y, async_cuts, incremental_cuts=False, local_passes=0.25):
    lr = ss.learners.BCFW(lam=0.01, replay=0, sampling="uniform", averaging=False, gap_every=None, seed=0)
    model = ss.MulticlassSSVM(labels=list(range(26)), scale=False, learner=lr)
    with tempfile.TemporaryDirectory(prefix="cuts-bench-") as ck:
        t0, c0 = time.perf_counter(), time.process_time()
        res = sd.run(model, (X, Y), task="multiclass", workers=2, round_examples=len(X) // 8, checkpoint_dir=ck,
                     passes=8 * local_passes, passes_per_round=local_passes, async_cuts=async_cuts, incremental_cuts=incremental_cuts)
        wall, driver_cpu = time.perf_counter() - t0, time.process_time() - c0
    H = res.history
    parts = [t for h in H for t in (h.get("parts_written") or []) + (h.get("cut_parts") or []) if t]
    part = {k: float(np.median([t.get(k, 0.0) for t in parts])) for k in
            ("snapshot", "chunks", "encode", "write", "fsync", "sha256", "seconds", "cpu")}
    part["bytes_stream"] = float(np.mean([t["bytes"] for t in parts if t["round"] <= 4]))
    part["bytes_refine"] = float(np.mean([t["bytes"] for t in parts if t["round"] > 4]))
    part["snapshot_cpu"] = float(np.median([t["snapshot_cpu"] for t in parts]))
    worker_cpu = float(np.mean([sum(w["round_cpu"] for w in h["workers"]) for h in H]))
    med = {k: float(np.median([h[k] for h in H])) for k in
           ("seconds", "seconds_learn", "seconds_mix", "seconds_certificate", "seconds_checkpoint")}
    med["seconds_cut_commit"] = float(np.median([h["seconds_cut_commit"] for h in H
                                                 if h.get("seconds_cut_commit") is not None] or [np.nan]))
    return {"rounds": len(H), "wall": wall, "driver_cpu": driver_cpu, "gap": res.certificate["gap"],
            "worker_round_cpu": worker_cpu, "part_bytes": None, **med, **{"part_" + k: v for k, v in part.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--local-passes", type=float, default=0.25, help="local passes per refinement round")
    ap.add_argument("--modes", default=";".join(MODES), help="semicolon-separated subset of the modes")
    a = ap.parse_args()
    X_tr, y_tr, _, _ = ocr_letters()
    X, Y = list(X_tr[:a.n]), [int(v) for v in y_tr[:a.n]]
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=sd.runtime_env(), log_to_driver=False)
    print(f"ray start {time.perf_counter() - t0:.1f} s", flush=True)
    job(X[:400], Y[:400], True)   # warm-up: numba compiles in the workers
    modes = {m: MODES[m] for m in a.modes.split(";")}
    out = {m: [] for m in modes}
    for _ in range(a.repeats):
        for mode, flags in modes.items():
            r = job(X, Y, *flags, local_passes=a.local_passes)
            out[mode].append(r)
            print(mode, {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
    ray.shutdown()
    cols = [("rounds", "rounds"), ("wall", "job wall s"), ("seconds", "round wall s"), ("seconds_learn", "learn s"),
            ("seconds_mix", "mix s"), ("seconds_certificate", "cert s"), ("seconds_checkpoint", "cut on path s"),
            ("seconds_cut_commit", "mixer commit s"),
            ("part_bytes_stream", "part bytes (stream)"), ("part_bytes_refine", "part bytes (refine)"),
            ("part_snapshot", "part snapshot s"), ("part_chunks", "part diff s"), ("part_encode", "part encode s"), ("part_write", "part write s"),
            ("part_fsync", "part fsync s"), ("part_sha256", "part sha s"), ("part_cpu", "part write CPU s"),
            ("worker_round_cpu", "workers' learn_round CPU s"), ("driver_cpu", "driver CPU s"), ("gap", "final gap")]
    print("| cuts | " + " | ".join(c[1] for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for mode in modes:
        rows = out[mode]
        vals = [float(np.mean([r[k] for r in rows])) for k, _ in cols]
        print(f"| {mode} | " + " | ".join(f"{v:.4g}" for v in vals) + " |")


if __name__ == "__main__":
    main()
