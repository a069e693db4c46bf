"""Distributed BCFW on Ray: passes and seconds to a gap of 0.1, test accuracy, for 1, 2 and 4
workers, on OCR letters (multiclass) and OCR-large words (chains).

    flock /tmp/bench.lock python bench/distributed.py           # OCR letters, ~5 min on 2 idle cores
    flock /tmp/bench.lock python bench/distributed.py --quick   # smoke run (--words: also OCR word chains)

Protocol. One local Ray cluster (num_cpus = cores). For K workers, the training examples are
sharded k mod K (in-memory shards); the stream is learned once (one block step per new example,
``replay`` = 0), in ``rounds_per_pass`` mixing rounds per pass; then refinement rounds of
1/rounds_per_pass local pass each, until the global certificate (the sum of the workers' block
gaps at the mixed weights, computed after every round) is <= 0.1 or ``max_passes``. A global
pass is n block steps summed over all workers. "single" is the same protocol in one process
without Ray (the learner's own learn/refine). Wall seconds include mixing, the certificate pass
and the consistent-cut checkpoint of every round; "learn CPU / worker" is the CPU time spent in
the workers' learning (their share of the work). The machine has 2 cores shared with other
jobs: with 4 workers, 2 at a time run, so wall time cannot fall as 1/K here -- the work per
worker is what shows the scaling.

Writes bench/results/distributed.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import ray  # noqa: E402

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from _common import cpu_model, fmt, ocr_letters, ocr_words  # noqa: E402

TARGET = 0.1


def letters(n_train, n_test):
    X_tr, y_tr, X_te, y_te = ocr_letters()
    return list(X_tr[:n_train]), [int(v) for v in y_tr[:n_train]], list(X_te[:n_test]), [int(v) for v in y_te[:n_test]]


def words(n_train):
    X_tr, Y_tr, X_te, Y_te = ocr_words()
    return X_tr[:n_train], Y_tr[:n_train], X_te, Y_te


def make_model(task, lam, seed=0):
    lr = ss.learners.BCFW(lam=lam, replay=0, sampling="uniform", averaging=False, gap_every=None, seed=seed)
    if task == "multiclass":
        return ss.MulticlassSSVM(labels=list(range(26)), learner=lr)
    return ss.SequenceTagger(labels=list(range(26)), learner=lr, loss="normalized")


def accuracy(model, task, X, Y):
    if task == "multiclass":
        return float(np.mean([model.predict_one(x) == y for x, y in zip(X, Y)]))
    pred = model.predict_many(X)
    return float(np.mean(np.concatenate([np.asarray(p) == np.asarray(y) for p, y in zip(pred, Y)])))


def run_single(task, data, lam, rpp, max_passes):
    """The same protocol in one process, no Ray."""
    Xa, Ya, Xb, Yb = data
    m = make_model(task, lam)
    n = len(Xa)
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in zip(Xa, Ya):
        m.predict_one(x)
        m.learn_one(x, y)
    passes = 1.0
    cert_s = 0.0
    reached = None
    while True:
        t1 = time.perf_counter()
        c = m._learner.certificate()
        cert_s += time.perf_counter() - t1
        if c.gap <= TARGET and reached is None:
            reached = {"passes": passes, "seconds": time.perf_counter() - t0 - cert_s}
            break
        if passes >= max_passes:
            break
        m._learner.refine(1.0 / rpp)
        passes += 1.0 / rpp
    return {"workers": "single", "n": n, "passes_to_target": reached and reached["passes"],
            "seconds_to_target": reached and reached["seconds"], "final_gap": c.gap, "passes": passes,
            "wall_seconds": time.perf_counter() - t0, "learn_cpu_per_worker": time.process_time() - c0,
            "test_accuracy": accuracy(m, task, Xb, Yb)}


def run_dist(task, data, lam, K, rpp, max_passes, ckdir, mix_step="fixed", beta=1.0, local_passes=None,
             cluster="local"):
    """``local_passes``: local passes per refinement round (H; default 1 / rpp)."""
    Xa, Ya, Xb, Yb = data
    n = len(Xa)
    per_round = max(1, int(np.ceil(n / (K * rpp))))
    lp = 1.0 / rpp if local_passes is None else float(local_passes)
    t0 = time.perf_counter()
    res = sd.run(make_model(task, lam), (Xa, Ya), task=task, workers=K, round_examples=per_round,
                 checkpoint_dir=ckdir, passes=max_passes - 1, passes_per_round=lp, tol=TARGET,
                 checkpoint_every=max(1, int(round(1.0 / lp))) if lp < 1 else 1, mix_step=mix_step,
                 beta=min(float(beta), K), cluster=cluster)
    wall = time.perf_counter() - t0
    H = res.history
    passes = 0.0
    reached = None
    elapsed = 0.0
    for h in H:
        passes += h["new_examples"] / n + h["refine_passes"]
        elapsed += h["seconds"]
        if reached is None and h.get("gap", np.inf) <= TARGET:
            reached = {"passes": passes, "seconds": elapsed, "round": h["round"]}
    last = H[-1]
    learn_cpu = [w["learn_cpu"] for w in last["workers"]]
    learn_wall = [w["learn_seconds"] for w in last["workers"]]
    rounds = len(H)
    return {"workers": K, "n": n, "passes_to_target": reached and reached["passes"], "mix_step": mix_step,
            "beta": min(float(beta), K), "local_passes": lp, "gammas": [h.get("gamma") for h in H],
            "seconds_to_target": reached and reached["seconds"], "final_gap": res.certificate["gap"],
            "passes": passes, "rounds": rounds, "rounds_per_pass": rpp,
            "wall_seconds": wall, "round_seconds_total": elapsed,
            "learn_cpu_per_worker": float(np.mean(learn_cpu)), "learn_cpu_max": float(np.max(learn_cpu)),
            "learn_wall_per_worker": float(np.mean(learn_wall)),
            "bytes_per_round": float(np.mean([h["bytes_up"] + h["bytes_down"] for h in H])),
            "mix_seconds_per_round": float(np.median([h["seconds_mix"] for h in H])),
            "certificate_seconds_per_round": float(np.median([h["seconds_certificate"] for h in H])),
            "checkpoint_seconds_per_round": float(np.mean([h["seconds_checkpoint"] for h in H])),
            "cuts": int(sum(bool(h.get("cut")) for h in H)),
            "learn_seconds_per_round": float(np.median([h["seconds_learn"] for h in H])),
            "test_accuracy": accuracy(res.model, task, Xb, Yb),
            "gaps": [h.get("gap") for h in H]}


#: (workers, beta, mix_step, local passes per refinement round or None for 1 / rounds per pass)
CONFIGS = [(1, 1.0, "fixed", None), (2, 1.0, "fixed", None), (2, 2.0, "fixed", None), (4, 1.0, "fixed", None),
           (4, 4.0, "fixed", None), (4, 4.0, "fixed", 1.0), (2, 1.0, "line", None)]


def label(r):
    if r["workers"] == "single":
        return "single", "—"
    mix = f"beta={r['beta']:g}" + (" line" if r["mix_step"] == "line" else "")
    return str(r["workers"]), f"{mix}, H={r['local_passes']:g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--words", action="store_true", help="also the OCR-large word chains")
    args = ap.parse_args()
    if args.quick:
        sets = [("multiclass", "OCR letters", letters(2000, 500), 0.01, 4, 6)]
    else:
        sets = [("multiclass", "OCR letters", letters(10000, 2000), 0.01, 4, 15)]
    if args.words:
        sets.append(("sequence", "OCR-large words", words(400 if args.quick else 2000), 0.01, 4, 6 if args.quick else 15))
    ncpu = os.cpu_count() or 1
    t_init = time.perf_counter()
    ray.init(num_cpus=ncpu, include_dashboard=False, runtime_env=sd.runtime_env(), log_to_driver=False)
    t_init = time.perf_counter() - t_init
    import tempfile
    rows = []
    try:
        for task, name, data, lam, rpp, max_passes in sets:
            c0 = time.process_time()
            r = run_single(task, data, lam, rpp, max_passes)
            r.update(dataset=name, lam=lam, driver_cpu=time.process_time() - c0)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "gaps"}), flush=True)
            for K, beta, mix_step, lp in CONFIGS:
                with tempfile.TemporaryDirectory() as d:
                    r = run_dist(task, data, lam, K, rpp, max_passes, d, mix_step, beta, lp)
                r.update(dataset=name, lam=lam)
                rows.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("gaps", "gammas")}), flush=True)
    finally:
        ray.shutdown()
    out = {"machine": {"cpu": cpu_model(), "cores": ncpu, "python": platform.python_version(),
                       "ray": ray.__version__}, "ray_init_seconds": t_init, "target_gap": TARGET,
           "quick": args.quick, "rows": rows}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    lines = [f"# Distributed BCFW on Ray (target gap {TARGET})", "",
             f"{cpu_model()}, {ncpu} cores; Ray {ray.__version__}; local cluster start {t_init:.1f} s. "
             f"lam = {sets[0][3]}, replay 0, uniform FW steps, {sets[0][4]} rounds per pass in the stream pass, "
             f"then refinement rounds of H local passes each; certificate every round; a consistent cut every "
             f"pass (every round when H >= 1; ckpt s / round is amortized over the rounds); at most {sets[0][5]} "
             "passes. beta = 1 is CoCoA averaging (gamma = 1/K), beta = K is CoCoA+ adding (sigma' = K, "
             "gamma = 1); `line`: the mixer's exact line search on gamma. A pass is n block steps summed over "
             "the workers. Subsets: the first n training letters of OCR-large, tested on the first 2,000 test "
             "letters.", "",
             "| data | workers | mixing | n | passes to 0.1 | x single | final gap | test acc | wall s | "
             "learn CPU / worker s | rounds | bytes / round | mix s / round | cert s / round | ckpt s / round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    single = {}
    for r in rows:
        if r["workers"] == "single":
            single[r["dataset"]] = r["passes_to_target"]
        s = single.get(r["dataset"])
        ratio = (r["passes_to_target"] / s) if (s and r["passes_to_target"]) else None
        k, mix = label(r)
        lines.append(f"| {r['dataset']} | {k} | {mix} | {r['n']} | {fmt(r['passes_to_target'])} | {fmt(ratio)} | "
                     f"{fmt(r['final_gap'])} | {fmt(r['test_accuracy'])} | "
                     f"{fmt(r['wall_seconds'])} | {fmt(r['learn_cpu_per_worker'])} | {fmt(r.get('rounds'))} | "
                     f"{fmt(r.get('bytes_per_round'))} | {fmt(r.get('mix_seconds_per_round'))} | "
                     f"{fmt(r.get('certificate_seconds_per_round'))} | {fmt(r.get('checkpoint_seconds_per_round'))} |")
    with open(os.path.join(HERE, "results", "distributed.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(HERE, "results", "distributed.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
