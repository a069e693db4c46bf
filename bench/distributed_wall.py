"""Wall-clock speed-up of the Ray scale-out on a compute-heavy chain stream (issue 25 item 6):
two workers against one process, same model settings, and where the distributed job's time goes.

    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/distributed_wall.py          # < 5 min
    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/distributed_wall.py --quick  # smoke run

Stream: the first ``--sentences`` (5,000) Brown training sentences, fine tags, the full tag set
of the corpus declared up front (what a distributed job needs), the token features of
``bench/gdmm_brown.py`` hashed to ``--n-features`` (2^14) columns (distributed learning needs one
feature index for every worker). Model: ``SequenceTagger(learner=BCFW(seed=0))`` -- the learner's
defaults (averaging, lambda following n, gap sampling with ``gap_every``, replay 1), the
single-machine configuration the scale-out now runs as it is.

Peers, in this order, in one run:

* ``single``: one process, ``learn_many`` over the stream (the library's own batch path);
* ``ray K=2``: ``distributed.run(workers=2)`` on a local Ray cluster of 2 CPUs with the run's
  defaults (rounds of ``--round-examples`` new examples per worker, adaptive mixing, a global
  certificate and a consistent cut every round, unless ``--snapshot-every`` / ``--checkpoint-every``
  say otherwise);
* ``inprocess K=2``: the same rounds without Ray (``cluster="inprocess"``, bit for bit the Ray
  run): the CPU the algorithm itself costs, one worker after the other.

Every row reports wall seconds, the CPU seconds of every process involved (the driver plus all
of its descendants -- the Ray daemons and actors -- read from /proc), the global gap of the
returned model's own certificate, and token accuracy on 1,000 held-out sentences. The Ray row
also splits its rounds into learn (the slowest worker's own learning time), Ray dispatch (the
rest of the learn phase: call, transfer of the deltas, scheduling), mix, certificate and cut.
The machine's load average is printed: under load (other jobs on the cores), wall time is not a
scaling measurement. Writes bench/results/distributed_wall.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import streamssvm as ss  # noqa: E402
import streamssvm.distributed as sd  # noqa: E402
from _common import cpu_model, fmt, write_results  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root=None):
    """CPU seconds (user + system) of process ``root`` (this one) and all of its live
    descendants, plus what its reaped children accumulated (``/proc/<pid>/stat``)."""
    root = os.getpid() if root is None else root
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rfind(")") + 2:].split()
        pid = int(name)
        parent[pid] = int(fields[1])
        ut, st, cut, cst = (int(v) for v in fields[11:15])
        cpu[pid] = (ut + st + cut + cst) / _TICK
    total = 0.0
    for pid, c in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += c
    return total


def load_stream(n_train, n_test, n_features):
    import gdmm_brown as gb
    tr, te, tags = gb.load("fine", n_train, n_test)
    return [x for x, _ in tr], [y for _, y in tr], [x for x, _ in te], [y for _, y in te], tags


def make_model(tags, n_features):
    return ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags, n_features=n_features)


def token_accuracy(model, X, Y):
    ok = tot = 0
    for x, y in zip(X, Y):
        p = model.predict_one(x)
        ok += sum(int(a == b) for a, b in zip(p, y))
        tot += len(y)
    return ok / max(tot, 1)


def warm(tags, n_features, X, Y):
    """Load the kernels (numba's disk cache) in this process outside the measurements."""
    m = make_model(tags, n_features)
    m.learn_many(X[:20], Y[:20])
    m.predict_one(X[0])
    m.certificate()


def run_single(data, n_features):
    X, Y, Xt, Yt, tags = data
    m = make_model(tags, n_features)
    c0, t0 = tree_cpu(), time.perf_counter()
    m.learn_many(X, Y)
    wall, cpu = time.perf_counter() - t0, tree_cpu() - c0
    return {"peer": "single", "wall": wall, "cpu": cpu, "gap": m.certificate().gap,
            "accuracy": token_accuracy(m, Xt, Yt)}


def run_dist(data, n_features, cluster, args):
    X, Y, Xt, Yt, tags = data
    with tempfile.TemporaryDirectory(prefix="dist-wall-") as d:
        c0, t0 = tree_cpu(), time.perf_counter()
        res = sd.run(make_model(tags, n_features), (X, Y), task="sequence", workers=args.workers,
                     cluster=cluster, round_examples=args.round_examples, checkpoint_dir=d,
                     snapshot_every=args.snapshot_every, checkpoint_every=args.checkpoint_every,
                     async_cuts=args.async_cuts)
        wall, cpu = time.perf_counter() - t0, tree_cpu() - c0
    h = res.history
    split = {"learn": sum(max(w["round_seconds"] for w in r["workers"]) for r in h),
             "dispatch": sum(r["seconds_learn"] - max(w["round_seconds"] for w in r["workers"]) for r in h),
             "mix": sum(r["seconds_mix"] for r in h),
             "certificate": sum(r["seconds_certificate"] for r in h),
             "cut": sum(r["seconds_checkpoint"] for r in h),
             "round_total": sum(r["seconds"] for r in h)}
    split["outside_rounds"] = wall - split["round_total"]
    first = h[0] if h else None
    return {"peer": f"{cluster} K={args.workers}", "wall": wall, "cpu": cpu, "rounds": res.rounds,
            "global_gap": res.certificate["gap"], "gap": res.model.certificate().gap,
            "accuracy": token_accuracy(res.model, Xt, Yt), "split": split,
            "first_round_learn": None if first is None else max(w["round_seconds"] for w in first["workers"]),
            "worker_learn_cpu": [w["learn_cpu"] for w in h[-1]["workers"]] if h else [],
            "bytes_per_round": (h[0]["bytes_up"] + h[0]["bytes_down"]) if h else 0,
            "rounds_detail": [{k: r[k] for k in ("round", "new_examples", "seconds", "seconds_learn", "seconds_mix",
                                                  "seconds_certificate", "seconds_checkpoint", "bytes_up",
                                                  "bytes_down")}
                              | {"worker_seconds": [w["round_seconds"] for w in r["workers"]]} for r in h]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=5000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--n-features", type=int, default=2 ** 14)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--round-examples", type=int, default=500)
    ap.add_argument("--snapshot-every", type=int, default=1)
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--async-cuts", action="store_true")
    ap.add_argument("--no-inprocess", action="store_true", help="skip the in-process row")
    ap.add_argument("--quick", action="store_true", help="600 sentences, a smoke run")
    ap.add_argument("--out", default=None, help="results stem (default bench/results/distributed_wall)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sentences, args.test, args.round_examples = 600, 100, 100
    t_start = time.perf_counter()
    load0 = os.getloadavg()
    data = load_stream(args.sentences, args.test, args.n_features)
    X, Y, _, _, tags = data
    print(f"{len(X)} sentences, {sum(map(len, Y))} tokens, {len(tags)} tags, load {load0}", flush=True)
    warm(tags, args.n_features, X, Y)
    rows = [run_single(data, args.n_features)]
    print(rows[-1]["peer"], fmt(rows[-1]["wall"]), fmt(rows[-1]["cpu"]), flush=True)
    import ray
    ray.init(num_cpus=args.workers, include_dashboard=False, runtime_env=sd.runtime_env(), log_to_driver=False)
    try:
        rows.append(run_dist(data, args.n_features, "local", args))
        rows[-1]["peer"] = f"ray K={args.workers}"
        print(rows[-1]["peer"], fmt(rows[-1]["wall"]), fmt(rows[-1]["cpu"]), rows[-1]["split"], flush=True)
    finally:
        ray.shutdown()
    if not args.no_inprocess:
        rows.append(run_dist(data, args.n_features, "inprocess", args))
        print(rows[-1]["peer"], fmt(rows[-1]["wall"]), fmt(rows[-1]["cpu"]), flush=True)
    load1 = os.getloadavg()
    single = rows[0]
    info = {"sentences": len(X), "tokens": sum(map(len, Y)), "tags": len(tags), "n_features": args.n_features,
            "workers": args.workers, "round_examples": args.round_examples, "snapshot_every": args.snapshot_every,
            "checkpoint_every": args.checkpoint_every, "async_cuts": args.async_cuts,
            "load_before": load0, "load_after": load1, "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "script_seconds": time.perf_counter() - t_start}
    L = ["# Distributed wall clock: 2 workers against one process on a Brown chain stream", "",
         f"{info['sentences']} Brown sentences ({info['tokens']} tokens), fine tags, {info['tags']} tags declared, "
         f"features hashed to {args.n_features}; `SequenceTagger(learner=BCFW(seed=0))` (the defaults: averaging, "
         f"lambda following n, gap sampling); distributed: rounds of {args.round_examples} new sentences per worker, "
         f"certificate every {args.snapshot_every} round(s), cut every {args.checkpoint_every} round(s)"
         f"{', asynchronous cuts' if args.async_cuts else ''}. {info['cores']} cores ({info['cpu_model']}); "
         f"load average before {load0[0]:.2f} / after {load1[0]:.2f} (1 min) -- under load, wall time is not a "
         "scaling measurement.", "",
         "| peer | wall s | CPU s (all processes) | wall / single | rounds | gap (model) | token accuracy |",
         "|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['peer']} | {fmt(r['wall'])} | {fmt(r['cpu'])} | {fmt(r['wall'] / single['wall'])} | "
                 f"{r.get('rounds', '-')} | {fmt(r['gap'], 4)} | {fmt(r['accuracy'], 4)} |")
    ray_row = next((r for r in rows if r["peer"].startswith("ray")), None)
    if ray_row is not None:
        s = ray_row["split"]
        L += ["", f"Where the Ray run's {fmt(ray_row['wall'])} s go (sums over {ray_row['rounds']} rounds; learn = the "
              "slowest worker's own time in its round, dispatch = the rest of the learn phase):", "",
              "| learn | Ray dispatch | mix | certificate | cut | outside the rounds (start, final model) |",
              "|---|---|---|---|---|---|",
              f"| {fmt(s['learn'])} | {fmt(s['dispatch'])} | {fmt(s['mix'])} | {fmt(s['certificate'])} | "
              f"{fmt(s['cut'])} | {fmt(s['outside_rounds'])} |", "",
              f"First round's learn (kernels loaded by each new actor process): {fmt(ray_row['first_round_learn'])} s; "
              f"bytes per round (up + down): {ray_row['bytes_per_round'] / 2**20:.1f} MiB."]
    data_out = {"info": info, "rows": rows}
    write_results(args.out or os.path.join(HERE, "results", "distributed_wall"), data_out, L)


if __name__ == "__main__":
    main()
