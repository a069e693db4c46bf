"""Distributed BCFW on chain tasks: passes to a duality gap against one process, on OCR-large words
and Brown sentences (coarse tags), at K = 2, 4, 8 workers, in process (pass counts).

    flock /tmp/bench.lock nice -n 0 python3 bench/distributed_chains.py            # words, ~15 min on 2 cores
    flock /tmp/bench.lock nice -n 0 python3 bench/distributed_chains.py --brown    # Brown
    flock /tmp/bench.lock nice -n 0 python3 bench/distributed_chains.py --quick    # smoke run

Protocol (``bench/distributed.py``'s, for chains). ``SequenceTagger(loss="normalized")``, BCFW with
replay 0, uniform FW steps, no gap passes, lam fixed; the training examples sharded k mod K;
the stream learned once in rounds of n / (R K) new examples per worker, then refinement rounds
of 1 / R local pass each, where R is the rounds per pass of the configuration; the adaptive
mixing (the default: sigma' from the last round's overlap, gamma by exact line search). The
distributed runs go in process (``cluster="inprocess"``: the Ray rounds bit for bit), so the
numbers are pass counts, not wall time; CPU s is the whole job in this one process (K workers
in turn, the mixer, the certificates). "gap": with averaging off, the mixed iterate's (the job's
global certificate); with averaging on, the returned model's own ``certificate()`` (of the
averaged weights, as one process reports). A certificate every 1/20 pass in every run (one
process: after every 1/20 pass of refinement), the first at the end of the stream; a pass is
n block steps summed over the workers. Test accuracy is per token, of the model the run
returns at the target (or at the pass limit).

Writes bench/results/distributed_words.{json,md} (``--brown``: distributed_brown.{json,md}).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from _common import brown_documents, cpu_model, fmt, ocr_words, split_documents, write_results  # noqa: E402
from gdmm_brown import base_tag, token_features  # noqa: E402

#: certificates every 1/CERT_RPP pass in every run
CERT_RPP = 20


def words_data(n_train):
    X_tr, Y_tr, X_te, Y_te = ocr_words()
    return {"name": "OCR-large words", "X": X_tr[:n_train], "Y": Y_tr[:n_train], "X_test": X_te, "Y_test": Y_te,
            "labels": list(range(26)), "n_features": None}


def coarse_tag(tag):
    """Brown's base tag cut to its first two characters (nn, vb, jj, in, at, ...): 40 tags."""
    return base_tag(tag)[:2]


def brown_data(n_train, n_test, n_features=2 ** 14):
    docs = brown_documents()

    def example(s):
        words = [w for w, _ in s]
        return [token_features(words, t) for t in range(len(words))], [coarse_tag(t) for _, t in s]
    tr, te = split_documents(docs, n_train, n_test, example)
    labels = sorted({t for _, ys in tr + te for t in ys})
    return {"name": "Brown (coarse tags)", "X": [x for x, _ in tr], "Y": [y for _, y in tr],
            "X_test": [x for x, _ in te], "Y_test": [y for _, y in te], "labels": labels, "n_features": n_features}


def make_model(data, lam, averaging, step="fw"):
    lr = ss.learners.BCFW(lam=lam, replay=0, sampling="uniform", averaging=averaging, gap_every=None, seed=0,
                          step=step)
    return ss.SequenceTagger(labels=data["labels"], learner=lr, loss="normalized", n_features=data["n_features"])


def accuracy(model, data):
    pred = model.predict_many(data["X_test"])
    return float(np.mean(np.concatenate([np.asarray(p) == np.asarray(y) for p, y in zip(pred, data["Y_test"])])))


def run_single(data, cfg, lam, max_passes, target):
    m = make_model(data, lam, cfg["averaging"], cfg.get("step", "fw"))
    c0, t0 = time.process_time(), time.perf_counter()
    for x, y in zip(data["X"], data["Y"]):
        m.learn_one(x, y)
    passes, reached, gaps = 1.0, None, []
    while True:
        c = m.certificate() if cfg["averaging"] else m.bound_learner.certificate()
        gaps.append((round(passes, 4), c.gap))
        if c.gap <= target:
            reached = passes
            break
        if passes >= max_passes - 1e-9:
            break
        m.bound_learner.refine(1.0 / CERT_RPP)
        passes += 1.0 / CERT_RPP
    return {"workers": "single", "passes_to_target": reached, "final_gap": c.gap, "test_accuracy": accuracy(m, data),
            "cpu_seconds": time.process_time() - c0, "wall_seconds": time.perf_counter() - t0, "gaps": gaps}


class _Reached(Exception):
    pass


def run_dist(data, cfg, K, lam, max_passes, target):
    n = len(data["X"])
    if cfg["rpp"] is None:   # the library's default round length: round_examples, passes_per_round not given
        rpp = int(round(1.0 / sd.default_passes_per_round(K)))
        lengths = {}
    else:
        rpp = int(cfg["rpp"](K))
        lengths = {"round_examples": max(1, int(np.ceil(n / (K * rpp)))), "passes_per_round": 1.0 / rpp}
    seen = {"passes": 0.0, "gaps": [], "model": None, "reached": None, "rounds": 0, "sigmas": [], "gammas": []}
    averaging = cfg["averaging"]

    def watch(rec, job):
        seen["passes"] += rec["new_examples"] / n + rec["refine_passes"]
        seen["rounds"] += 1
        seen["sigmas"].append(rec.get("sigma"))
        seen["gammas"].append(rec.get("gamma"))
        if "gap" not in rec:
            return
        if averaging:
            model = job.final_model()
            gap = model.certificate().gap
        else:
            model, gap = None, rec["gap"]
        seen["gaps"].append((round(seen["passes"], 4), gap, rec["gap"]))
        if gap <= target or seen["passes"] >= max_passes - 1e-9:
            seen["model"] = model if model is not None else job.final_model()
            if gap <= target:
                seen["reached"] = seen["passes"]
            raise _Reached

    c0, t0 = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        try:
            sd.run(make_model(data, lam, averaging, cfg.get("step", "fw")), (data["X"], data["Y"]), task="sequence",
                   workers=K, checkpoint_dir=d, passes=max_passes, snapshot_every=max(1, rpp // CERT_RPP),
                   checkpoint_every=10 ** 6, cluster="inprocess", on_round=watch, **lengths, **cfg.get("run", {}))
        except _Reached:
            pass
    sig = [v for v in seen["sigmas"] if v is not None]
    return {"workers": K, "rounds_per_pass": rpp, "passes_to_target": seen["reached"],
            "final_gap": seen["gaps"][-1][1], "iterate_gap": seen["gaps"][-1][2], "rounds": seen["rounds"],
            "median_sigma": float(np.median(sig)) if sig else None,
            "gamma_at_1": float(np.mean([g == 1.0 for g in seen["gammas"] if g is not None])),
            "test_accuracy": accuracy(seen["model"], data), "cpu_seconds": time.process_time() - c0,
            "wall_seconds": time.perf_counter() - t0, "gaps": seen["gaps"]}


#: configurations: rounds per pass R as a function of K, averaging (single and distributed alike)
CONFIGS = {
    "R=20": {"rpp": lambda K: 20, "averaging": False,
             "what": "rounds of 1/20 pass (n/20 block steps of the union between two mixings), averaging off"},
    "R=20K": {"rpp": lambda K: 20 * K, "averaging": False,
              "what": "rounds of 1/(20 K) pass (n/(20 K) block steps of the union, n/(20 K^2) per worker), "
                      "averaging off"},
    "R=20K avg": {"rpp": lambda K: 20 * K, "averaging": True,
                  "what": "rounds of 1/(20 K) pass, averaging on (the gap of the averaged weights)"},
    "default": {"rpp": None, "averaging": False,
                "what": "the library's default round lengths (rounds of 1/(20 K) pass, at most 500 new examples "
                        "per worker in the stream: sd.default_round_examples, sd.default_passes_per_round), "
                        "averaging off"},
    "default avg": {"rpp": None, "averaging": True,
                    "what": "the library's default round lengths (as `default`), averaging on"},
}


def measure(brown=False, quick=False, names=("R=20", "R=20K", "R=20K avg"), ks=(2, 4, 8), lam=0.01, max_passes=15.0,
            n=None, target=None):
    """Every configuration of ``names`` at every K of ``ks`` and the single process: returns the
    results' stem, the JSON and the markdown lines."""
    if brown:
        stem, target = "distributed_brown", (0.2 if target is None else target)
        data = brown_data(n or (300 if quick else 2000), 100 if quick else 1000)
    else:
        stem, target = "distributed_words", (0.2 if target is None else target)
        data = words_data(n or (300 if quick else 2000))
    n = len(data["X"])
    ks = [2] if quick else [int(v) for v in ks]
    rows = []
    singles = {}
    for name in names:
        cfg = CONFIGS[name]
        if cfg["averaging"] not in singles:
            r = run_single(data, cfg, lam, max_passes, target)
            r.update(config="single (averaging %s)" % ("on" if cfg["averaging"] else "off"), averaging=cfg["averaging"])
            singles[cfg["averaging"]] = r
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "gaps"}), flush=True)
        for K in ks:
            r = run_dist(data, cfg, K, lam, max_passes, target)
            r.update(config=name, averaging=cfg["averaging"])
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "gaps"}), flush=True)
    lines = [f"# Distributed BCFW on chains: passes to a gap of {target} ({data['name']})", "",
             f"{cpu_model()}. {n} training sequences, {len(data['X_test'])} test sequences, {len(data['labels'])} labels"
             + (f", dict features hashed to {data['n_features']} columns" if data["n_features"] else "")
             + f"; lam = {lam}, normalized Hamming loss, replay 0, uniform FW steps, no gap passes, adaptive "
             f"mixing; in process (the Ray rounds bit for bit: pass counts, not wall time); at most "
             f"{max_passes:g} passes. Written by `bench/distributed_chains.py` (protocol in its docstring).", "",
             "Configurations (R: rounds per pass; a round ends when each worker took n / (R K) new examples, or 1 / R "
             "local pass in refinement):", ""]
    lines += [f"- `{c}`: {CONFIGS[c]['what']}" for c in names]
    lines += ["", "| config | workers | rounds / pass | passes to target | x single | final gap | test accuracy | "
              "median sigma' | rounds with gamma = 1 | rounds | CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s_ = singles[r["averaging"]]["passes_to_target"]
        ratio = r["passes_to_target"] / s_ if (s_ and r["passes_to_target"]) else None
        lines.append(f"| {r['config']} | {r['workers']} | {fmt(r.get('rounds_per_pass'))} | {fmt(r['passes_to_target'])} | "
                     f"{fmt(ratio)} | {fmt(r['final_gap'])} | {fmt(r['test_accuracy'])} | "
                     f"{fmt(r.get('median_sigma'))} | {fmt(r.get('gamma_at_1'))} | {fmt(r.get('rounds'))} | "
                     f"{fmt(r['cpu_seconds'])} |")
    out = {"machine": {"cpu": cpu_model()}, "dataset": data["name"], "n": n, "n_test": len(data["X_test"]),
           "labels": len(data["labels"]), "n_features": data["n_features"], "lam": lam, "target": target,
           "max_passes": max_passes, "quick": quick,
           "configs": {c: CONFIGS[c]["what"] for c in names}, "rows": rows}
    return stem, out, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--brown", action="store_true", help="Brown sentences (coarse tags) instead of OCR words")
    ap.add_argument("--configs", default="R=20,R=20K,R=20K avg,default,default avg")
    ap.add_argument("--workers", default="2,4,8")
    ap.add_argument("--max-passes", type=float, default=15.0)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--lam", type=float, default=0.01)
    args = ap.parse_args()
    stem, out, lines = measure(args.brown, args.quick, [c.strip() for c in args.configs.split(",")],
                               args.workers.split(","), args.lam, args.max_passes, args.n, args.target)
    if args.quick:
        print("\n".join(lines))
    else:
        write_results(os.path.join(HERE, "results", stem), out, lines)


if __name__ == "__main__":
    main()
