"""Distributed BCFW: passes to a duality gap, test accuracy and per-round costs for 1 ... 32 workers, on
OCR letters (multiclass) and OCR-large words (chains).

    flock /tmp/bench.lock python bench/distributed.py           # OCR letters, ~10 min on 2 cores
    python bench/distributed.py --words                          # OCR words, rounds of 1/20 pass (distributed_words_r20.*;
                                                                 # bench/distributed_chains.py writes distributed_words.*)
    flock /tmp/bench.lock python bench/distributed.py --quick   # smoke run
    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/distributed.py --all
                                          # the whole distributed.md in one command (bench/distributed_report.py)

Protocol. One local Ray cluster (num_cpus = cores). For K workers, the training examples are
sharded k mod K (in-memory shards); the stream is learned once (one block step per new example,
``replay`` = 0) in rounds of n / (rounds_per_pass K) new examples per worker; then refinement
rounds of 1 / rounds_per_pass local pass each, until the global certificate (the sum of the
workers' block gaps at the mixed weights, computed after every round) reaches the target or
``max_passes``. A global pass is n block steps summed over all workers. "single" is the same
protocol in one process without Ray (the learner's own learn/refine, a certificate every
1 / rounds_per_pass pass). Rows with cluster "inprocess" run the same rounds without Ray
(``distributed.run(cluster="inprocess")``, bit for bit the Ray run): pass counts for more workers
than the machine has cores; their seconds are not reported. Wall seconds of the Ray rows include
mixing, the certificate pass and the consistent cut; with 2 cores, K = 4 time-shares them.
``bench/project.py`` turns the measured per-round costs and pass counts into the projection.

Writes bench/results/distributed.{json,md} (``--words``: distributed_words_r20.{json,md}). ``--all``
writes the whole distributed.md -- these letters, the chains, the per-round split, the multi-node
kill test and the projection -- in one command (``bench/distributed_report.py``).
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
from distributed_report import round_split  # noqa: E402

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


def run_single(task, data, lam, rpp, max_passes, target=None):
    """The same protocol in one process, no Ray (a certificate every 1 / rpp pass)."""
    target = TARGET if target is None else target
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
        if c.gap <= target and reached is None:
            reached = {"passes": passes, "seconds": time.perf_counter() - t0 - cert_s}
            break
        if passes >= max_passes:
            break
        m._learner.refine(1.0 / (rpp or 20))
        passes += 1.0 / (rpp or 20)
    return {"workers": "single", "n": n, "passes_to_target": reached and reached["passes"], "target": target,
            "rounds_per_pass": rpp, "cluster": "—",
            "seconds_to_target": reached and reached["seconds"], "final_gap": c.gap, "passes": passes,
            "wall_seconds": time.perf_counter() - t0, "learn_cpu_per_worker": time.process_time() - c0,
            "test_accuracy": accuracy(m, task, Xb, Yb)}


def run_dist(task, data, lam, K, rpp, max_passes, ckdir, mix_step="fixed", beta=1.0, local_passes=None,
             cluster="local", target=None):
    """``local_passes``: local passes per refinement round (H; default 1 / rpp)."""
    target = TARGET if target is None else target
    Xa, Ya, Xb, Yb = data
    n = len(Xa)
    if rpp is None:   # the library's default round lengths (what a user gets): round_examples, passes_per_round unset
        lp = sd.default_passes_per_round(K) if local_passes is None else float(local_passes)
        lengths = {} if local_passes is None else {"passes_per_round": lp}
    else:
        lp = 1.0 / rpp if local_passes is None else float(local_passes)
        lengths = {"round_examples": max(1, int(np.ceil(n / (K * rpp)))), "passes_per_round": lp}
    t0 = time.perf_counter()
    res = sd.run(make_model(task, lam), (Xa, Ya), task=task, workers=K, checkpoint_dir=ckdir, passes=max_passes - 1,
                 tol=TARGET, checkpoint_every=max(1, int(round(1.0 / lp))) if lp < 1 else 1, mix_step=mix_step,
                 beta=min(float(beta), K), cluster=cluster, **lengths)
    wall = time.perf_counter() - t0
    H = res.history
    passes = 0.0
    reached = None
    elapsed = 0.0
    for h in H:
        passes += h["new_examples"] / n + h["refine_passes"]
        elapsed += h["seconds"]
        if reached is None and h.get("gap", np.inf) <= target:
            reached = {"passes": passes, "seconds": elapsed, "round": h["round"]}
    last = H[-1]
    learn_cpu = [w["learn_cpu"] for w in last["workers"]]
    learn_wall = [w["learn_seconds"] for w in last["workers"]]
    rounds = len(H)
    return {"workers": K, "n": n, "passes_to_target": reached and reached["passes"], "mix_step": mix_step,
            "target": target, "cluster": cluster, "sigmas": [h.get("sigma") for h in H],
            "overlaps": [h.get("overlap") for h in H],
            "seconds_to_target_learn": reached and sum(h["seconds_learn"] for h in H if h["round"] <= reached["round"]),
            "rounds_to_target": reached and reached["round"],
            "learn_cpu_to_target": reached and float(np.mean(
                [w["learn_cpu"] for w in next(h for h in H if h["round"] == reached["round"])["workers"]])),
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
            "round_split": round_split(H),
            "test_accuracy": accuracy(res.model, task, Xb, Yb),
            "gaps": [h.get("gap") for h in H]}


#: (workers, beta, mix_step, cluster): every run in rounds of 1 / rounds_per_pass pass (stream and refinement);
#: "inprocess" runs the same algebra without Ray (bit for bit equal, tests/test_distributed.py) -- pass counts at
#: more workers than this machine has cores, no wall time
LETTERS = [(1, 1.0, "fixed", "local"), (2, 2.0, "fixed", "local"), (2, 2.0, "adaptive", "local"),
           (4, 4.0, "fixed", "local"), (4, 4.0, "adaptive", "local"), (8, 8.0, "fixed", "inprocess"),
           (8, 8.0, "adaptive", "inprocess"), (16, 16.0, "adaptive", "inprocess"), (32, 32.0, "adaptive", "inprocess")]
WORDS = [(2, 2.0, "fixed", "inprocess"), (2, 2.0, "adaptive", "inprocess"), (4, 4.0, "fixed", "inprocess"),
         (4, 4.0, "adaptive", "inprocess"), (8, 8.0, "fixed", "inprocess"), (8, 8.0, "adaptive", "inprocess")]


def label(r):
    if r["workers"] == "single":
        return "single", "—"
    mix = f"beta={r['beta']:g} {r['mix_step']}"
    return str(r["workers"]), mix


def measure(args):
    """The letters (or words / in-process) runs of ``args``: returns the stem, the JSON and the
    markdown lines of the table."""
    rpp = args.rounds_per_pass
    if args.inprocess:
        ks = [int(v) for v in args.inprocess.split(",")]
        stem = f"distributed_rpp{rpp}" if rpp else "distributed_inprocess"
        cfg = [(K, float(K), m, "inprocess") for K in ks for m in ("fixed", "adaptive")]
        sets = [("multiclass", "OCR letters", letters(10000, 2000), 0.01, rpp, 15, TARGET, cfg)]
    elif args.words:
        stem = "distributed_words_r20"
        sets = [("sequence", "OCR-large words", words(400 if args.quick else 2000), 0.01, rpp, 4 if args.quick else 15,
                 0.2, WORDS[:2] if args.quick else WORDS)]
    else:
        stem = "distributed"
        sets = [("multiclass", "OCR letters", letters(2000, 500) if args.quick else letters(10000, 2000), 0.01, rpp,
                 6 if args.quick else 15, TARGET, LETTERS[:3] if args.quick else LETTERS)]
    ncpu = os.cpu_count() or 1
    t_init = time.perf_counter()
    if any(c[3] == "local" for st in sets for c in st[7]):
        ray.init(address="local", num_cpus=ncpu, include_dashboard=False, runtime_env=sd.runtime_env(), log_to_driver=False)
    t_init = time.perf_counter() - t_init
    import tempfile
    rows = []
    try:
        for task, name, data, lam, rpp_, max_passes, target, configs in sets:
            c0 = time.process_time()
            r = run_single(task, data, lam, rpp_, max_passes, target)
            r.update(dataset=name, lam=lam, driver_cpu=time.process_time() - c0)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "gaps"}), flush=True)
            for K, beta, mix_step, cluster in configs:
                with tempfile.TemporaryDirectory() as d:
                    r = run_dist(task, data, lam, K, rpp_, max_passes, d, mix_step, beta, None, cluster, target)
                r.update(dataset=name, lam=lam)
                rows.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("gaps", "gammas", "sigmas", "overlaps")}),
                      flush=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    out = {"machine": {"cpu": cpu_model(), "cores": ncpu, "python": platform.python_version(),
                       "ray": ray.__version__}, "ray_init_seconds": t_init, "target_gap": sets[0][6],
           "quick": args.quick, "rows": rows}
    name, lam, rpp_, max_passes, target = sets[0][1], sets[0][3], sets[0][4], sets[0][5], sets[0][6]
    lines = [f"# Distributed BCFW: passes to a gap of {target} ({name})", "",
             f"{cpu_model()}, {ncpu} cores; Ray {ray.__version__}; local cluster start {t_init:.1f} s. "
             f"lam = {lam}, replay 0, uniform FW steps, averaging off (single and distributed alike); "
             + (f"rounds of 1/{rpp_} pass (stream: n/({rpp_} K) new examples per worker; refinement: 1/{rpp_} local "
                f"pass), a global certificate every round (the single process: every 1/{rpp_} pass)" if rpp_ else
                "the library's default round lengths (stream: 1/(20 K) pass, at most 500 new examples per worker, "
                "sd.default_round_examples; refinement: 1/(20 K) pass, sd.default_passes_per_round), a global "
                "certificate every round (the single process: every 1/20 pass)")
             + f", a consistent cut every pass; at most {max_passes} passes. A pass is n block steps summed over "
             "the workers. `fixed`: "
             "gamma = beta / K with sigma' = beta (beta = K: CoCoA+ adding); `adaptive`: sigma' = clip(1.25 rho, "
             "1, K) from the last round's measured overlap rho of the workers' changes, gamma by exact line "
             "search. cluster `local`: Ray actors on this machine (K = 4 time-shares 2 cores); `inprocess`: the "
             "same rounds without Ray, workers called in turn (pass counts only: its seconds are not a "
             "measurement of anything distributed).", "",
             "| data | workers | cluster | mixing | n | passes to target | x single | final gap | test acc | "
             "median sigma' | rounds to target | wall s | learn CPU / worker s | bytes / round | learn s / round | "
             "mix s / round | cert s / round | ckpt s / round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    single = {}
    for r in rows:
        if r["workers"] == "single":
            single[r["dataset"]] = r["passes_to_target"]
        s_ = single.get(r["dataset"])
        ratio = (r["passes_to_target"] / s_) if (s_ and r["passes_to_target"]) else None
        k, mix = label(r)
        ray_row = r.get("cluster") == "local"
        sig = [v for v in r.get("sigmas", []) if v is not None]
        lines.append(
            f"| {r['dataset']} | {k} | {r.get('cluster', '—')} | {mix} | {r['n']} | {fmt(r['passes_to_target'])} | "
            f"{fmt(ratio)} | {fmt(r['final_gap'])} | {fmt(r['test_accuracy'])} | "
            f"{fmt(float(np.median(sig)) if sig else None)} | {fmt(r.get('rounds_to_target'))} | "
            f"{fmt(r['wall_seconds']) if (ray_row or r['workers'] == 'single') else '—'} | "
            f"{fmt(r['learn_cpu_per_worker']) if (ray_row or r['workers'] == 'single') else '—'} | "
            f"{fmt(r.get('bytes_per_round'))} | "
            + " | ".join(fmt(r.get(c)) if ray_row else "—" for c in (
                "learn_seconds_per_round", "mix_seconds_per_round", "certificate_seconds_per_round",
                "checkpoint_seconds_per_round")) + " |")
    return stem, out, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--words", action="store_true", help="OCR-large word chains (in-process pass counts) instead of "
                    "the OCR letters; writes distributed_words_r20.{json,md}")
    ap.add_argument("--rounds-per-pass", type=int, default=None,
                    help="rounds of 1/R pass (stream: n/(R K) new examples per worker; refinement 1/R local pass); "
                    "default: the library's default round lengths (rounds of 1/(20 K) pass, at most 500 new "
                    "examples per worker in the stream), what a user gets")
    ap.add_argument("--inprocess", default=None, help="comma-separated worker counts: only these, all in process "
                    "(pass counts; writes distributed_rpp<R>.{json,md})")
    ap.add_argument("--all", action="store_true", help="the whole bench/results/distributed.md: the letters, the "
                    "chains (bench/distributed_chains.py), the per-round overhead split, the multi-node kill test and "
                    "the projection (bench/project.py), one command")
    ap.add_argument("--parts", default="letters,chains,multinode,projection",
                    help="with --all: which parts to (re)measure (the others are read from distributed.json)")
    args = ap.parse_args()
    if args.all:
        from distributed_report import report
        report(args, measure)
        return
    stem, out, lines = measure(args)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", stem + ".json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(HERE, "results", stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
