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
* ``single, predict then learn``: one process, ``predict_learn_one`` per record -- the
  progressive predictions ``streamssvm run`` makes, and a distributed worker too;
* ``ray K=2``: ``distributed.run(workers=2)`` on a local Ray cluster of 2 CPUs with the run's
  defaults (rounds of ``--round-examples`` new examples per worker, adaptive mixing, a global
  certificate and a consistent cut every round, unless ``--snapshot-every`` / ``--checkpoint-every``
  say otherwise); then the same with ``async_cuts=True``, and "lean": the certificate and the cut
  at the end only (``--no-variants``: the first only);
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
    return sum(tree_cpu_by_pid(root).values())


class CpuMeter:
    """CPU seconds of this process and its descendants (the Ray daemons and actors) over a
    ``with`` block: every process is read every 0.25 s and counted from its first to its last
    reading, so actors that exit inside the block count up to their last reading (at most
    0.25 s of theirs is lost)."""

    def __enter__(self):
        import threading
        self.first, self.last = tree_cpu_by_pid(), {}
        self.last.update(self.first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.wait(0.25):
            self.last.update(tree_cpu_by_pid())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.last.update(tree_cpu_by_pid())
        self.cpu = sum(v - self.first.get(pid, 0.0) for pid, v in self.last.items())
        return False


def tree_cpu_by_pid(root=None):
    """``{pid: CPU seconds}`` of process ``root`` (this one) and its live descendants."""
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
    out = {}
    for pid, c in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            out[pid] = c
    return out


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


def run_single_progressive(data, n_features):
    """One process as ``streamssvm run`` learns a stream: each record predicted, then learned
    (``predict_learn_one``), the progressive predictions a distributed worker also makes."""
    X, Y, Xt, Yt, tags = data
    m = make_model(tags, n_features)
    c0, t0 = tree_cpu(), time.perf_counter()
    ok = tot = 0
    for x, y in zip(X, Y):
        p = m.predict_learn_one(x, y)
        ok += sum(int(a == b) for a, b in zip(p, y))
        tot += len(y)
    wall, cpu = time.perf_counter() - t0, tree_cpu() - c0
    return {"peer": "single, predict then learn", "wall": wall, "cpu": cpu, "gap": m.certificate().gap,
            "accuracy": token_accuracy(m, Xt, Yt), "progressive_accuracy": ok / max(tot, 1)}


def run_dist(data, n_features, cluster, args, variant=""):
    """``variant``: "" (the run's defaults), ``"async cuts"`` (each cut written while the next
    round learns) or ``"lean"`` (the global certificate and the consistent cut at the end only:
    what the rounds cost without them)."""
    X, Y, Xt, Yt, tags = data
    every = 10 ** 6 if variant == "lean" else None
    with tempfile.TemporaryDirectory(prefix="dist-wall-") as d, CpuMeter() as meter:
        t0 = time.perf_counter()
        res = sd.run(make_model(tags, n_features), (X, Y), task="sequence", workers=args.workers,
                     cluster=cluster, round_examples=args.round_examples, checkpoint_dir=d,
                     snapshot_every=every or args.snapshot_every, checkpoint_every=every or args.checkpoint_every,
                     async_cuts=args.async_cuts or variant == "async cuts")
        wall = time.perf_counter() - t0
    cpu = meter.cpu
    h = res.history
    split = {"learn": sum(max(w["round_seconds"] for w in r["workers"]) for r in h),
             "dispatch": sum(r["seconds_learn"] - max(w["round_seconds"] for w in r["workers"]) for r in h),
             "mix": sum(r["seconds_mix"] for r in h),
             "certificate": sum(r["seconds_certificate"] for r in h),
             "cut": sum(r["seconds_checkpoint"] for r in h),
             "round_total": sum(r["seconds"] for r in h)}
    split["outside_rounds"] = wall - split["round_total"]
    first = h[0] if h else None
    n_tok = sum(map(len, Y))
    prog = res.history[-1]["metrics"].get("token_accuracy") if h else None
    return {"peer": f"{cluster} K={args.workers}" + (f", {variant}" if variant else ""), "wall": wall, "cpu": cpu,
            "rounds": res.rounds, "progressive_accuracy": prog, "tokens": n_tok,
            "global_gap": res.certificate["gap"], "gap": res.model.certificate().gap,
            "accuracy": token_accuracy(res.model, Xt, Yt), "split": split,
            "first_round_learn": None if first is None else max(w["round_seconds"] for w in first["workers"]),
            "worker_learn_cpu": [w["learn_cpu"] for w in h[-1]["workers"]] if h else [],
            "bytes_per_round": (h[0]["bytes_up"] + h[0]["bytes_down"]) if h else 0,
            "mean_bytes_per_round": sum(r["bytes_up"] + r["bytes_down"] for r in h) / max(len(h), 1),
            "weights_bytes": int(sum(getattr(res.model.bound_learner.W, k).nbytes for k in ("E", "T", "B")))
            if res.model.bound_learner is not None else 0,
            "part_bytes_per_cut": _part_bytes(h),
            "rounds_detail": [{k: r[k] for k in ("round", "new_examples", "seconds", "seconds_learn", "seconds_mix",
                                                  "seconds_certificate", "seconds_checkpoint", "bytes_up",
                                                  "bytes_down")}
                              | {"worker_seconds": [w["round_seconds"] for w in r["workers"]]} for r in h]}


def _part_bytes(h):
    """Mean bytes of the workers' parts written per cut (the mixer's own part not counted)."""
    sizes = [sum(p["bytes"] for p in r.get("cut_parts", []) + r.get("parts_written", [])) for r in h]
    sizes = [v for v in sizes if v]
    return sum(sizes) / len(sizes) if sizes else 0


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
    ap.add_argument("--no-variants", action="store_true", help="only the default Ray run (no asynchronous cuts, "
                    "no certificate and cut at the end only)")
    ap.add_argument("--quick", action="store_true", help="600 sentences, a smoke run")
    ap.add_argument("--out", default=None, help="results stem (default bench/results/distributed_wall)")
    ap.add_argument("--render", default=None, help="write the markdown of this results JSON again (no measuring)")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        write_results(os.path.splitext(args.render)[0], data, render(data))
        return
    if args.quick:
        args.sentences, args.test, args.round_examples = 600, 100, 100
    t_start = time.perf_counter()
    load0 = os.getloadavg()
    data = load_stream(args.sentences, args.test, args.n_features)
    X, Y, _, _, tags = data
    print(f"{len(X)} sentences, {sum(map(len, Y))} tokens, {len(tags)} tags, load {load0}", flush=True)
    warm(tags, args.n_features, X, Y)
    rows = [run_single(data, args.n_features), run_single_progressive(data, args.n_features)]
    for r in rows:
        print(r["peer"], fmt(r["wall"]), fmt(r["cpu"]), flush=True)
    import ray
    ray.init(address="local", num_cpus=args.workers, include_dashboard=False, runtime_env=sd.runtime_env(), log_to_driver=False)
    try:
        for variant in ("",) if args.no_variants else ("", "async cuts", "lean"):
            rows.append(run_dist(data, args.n_features, "local", args, variant=variant))
            rows[-1]["peer"] = rows[-1]["peer"].replace("local", "ray")
            print(rows[-1]["peer"], fmt(rows[-1]["wall"]), fmt(rows[-1]["cpu"]), rows[-1]["split"], flush=True)
    finally:
        ray.shutdown()
    if not args.no_inprocess:
        rows.append(run_dist(data, args.n_features, "inprocess", args))
        print(rows[-1]["peer"], fmt(rows[-1]["wall"]), fmt(rows[-1]["cpu"]), flush=True)
    load1 = os.getloadavg()
    info = {"sentences": len(X), "tokens": sum(map(len, Y)), "tags": len(tags), "n_features": args.n_features,
            "workers": args.workers, "round_examples": args.round_examples, "snapshot_every": args.snapshot_every,
            "checkpoint_every": args.checkpoint_every, "async_cuts": args.async_cuts,
            "load_before": load0, "load_after": load1, "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "script_seconds": time.perf_counter() - t_start}
    data_out = {"info": info, "rows": rows}
    write_results(args.out or os.path.join(HERE, "results", "distributed_wall"), data_out, render(data_out))


def render(data):
    """The markdown of a run's results (``--render FILE.json`` writes it again without measuring)."""
    info, rows = data["info"], data["rows"]
    load0, load1 = info["load_before"], info["load_after"]
    single, prog = rows[0], rows[1]
    L = ["# Distributed wall clock: 2 workers against one process on a Brown chain stream", "",
         f"{info['sentences']} Brown sentences ({info['tokens']} tokens), fine tags, {info['tags']} tags declared, "
         f"features hashed to {info['n_features']}; `SequenceTagger(learner=BCFW(seed=0))` (the defaults: averaging, "
         f"lambda following n, gap sampling); distributed: rounds of {info['round_examples']} new sentences per "
         f"worker, certificate every {info['snapshot_every']} round(s), cut every {info['checkpoint_every']} round(s)"
         f"{', asynchronous cuts' if info['async_cuts'] else ''}. {info['cores']} cores ({info['cpu_model']}); "
         f"load average before {load0[0]:.2f} / after {load1[0]:.2f} (1 min) -- under load, wall time is not a "
         f"scaling measurement. The whole script: {info['script_seconds']:.0f} s.", "",
         "| peer | wall s | CPU s (all processes) | wall / single | wall / single predict+learn | rounds | "
         "gap (model) | token accuracy (1,000 held out) | progressive token accuracy |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['peer']} | {fmt(r['wall'])} | {fmt(r['cpu'])} | {fmt(r['wall'] / single['wall'])} | "
                 f"{fmt(r['wall'] / prog['wall'])} | {r.get('rounds', '-')} | {fmt(r['gap'], 4)} | "
                 f"{fmt(r['accuracy'], 4)} | {fmt(r.get('progressive_accuracy'), 4)} |")
    L += ["", "`single`: `learn_many` (no predictions); `single, predict then learn`: `predict_learn_one` per "
          "record, the progressive predictions `streamssvm run` and a distributed worker make. `async cuts`: "
          "`async_cuts=True`; `lean`: the global certificate and the consistent cut at the end only. Gap: the "
          "returned model's own `certificate()` (distributed: of the mixer's average). In-process rows run the "
          "workers one after the other (CPU of the algorithm, not a wall-time peer).", "",
          "Where each distributed run's time goes (sums over its rounds; learn = the slowest worker's own time in "
          "its round -- snapshot, steps, predictions, delta --, dispatch = the rest of the learn phase: the Ray "
          "calls and the transfer of the deltas; outside = start, restore, final model):", "",
          "| peer | learn | dispatch | mix | certificate | cut | outside the rounds | first round's learn | "
          "MiB per round (up + down) | workers' parts MiB per cut |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "split" not in r:
            continue
        s = r["split"]
        L.append(f"| {r['peer']} | {fmt(s['learn'])} | {fmt(s['dispatch'])} | {fmt(s['mix'])} | "
                 f"{fmt(s['certificate'])} | {fmt(s['cut'])} | {fmt(s['outside_rounds'])} | "
                 f"{fmt(r['first_round_learn'])} | {r.get('mean_bytes_per_round', r['bytes_per_round']) / 2**20:.1f} | "
                 f"{r.get('part_bytes_per_cut', 0) / 2**20:.1f} |")
    ray = next((r for r in rows if r["peer"] == f"ray K={info['workers']}"), None)
    if ray is not None:
        s, w = ray["split"], ray["wall"]
        ideal = prog["wall"] / info["workers"]
        share = ", ".join(f"{k} {100 * s[k] / w:.0f}%" for k in ("learn", "cut", "certificate", "mix", "dispatch",
                                                                   "outside_rounds"))
        L += ["", f"**What limits the ratio** (the default Ray run): of its {fmt(w)} s, {share}. With "
              f"{info['workers']} workers the learning could take {fmt(ideal)} s (the single predict-then-learn "
              f"run over {info['workers']}); the workers' own learning took {fmt(s['learn'])} s summed over the "
              "rounds (each round waits for its slowest worker; on a loaded machine the two worker processes share "
              "the cores with everything else). The weight sums are "
              f"{ray.get('weights_bytes', 0) / 2**20:.0f} MiB; a round moves "
              f"{ray.get('mean_bytes_per_round', ray['bytes_per_round']) / 2**20:.1f} MiB between the workers and the "
              "mixer (sparse: each worker's changed entries up, the mixed point's changed entries down) and the "
              f"workers' parts of a cut hold {ray.get('part_bytes_per_cut', 0) / 2**20:.1f} MiB (the dual blocks, "
              "which the blend moves every round, and patches of the weights); the mixer still mixes, averages and "
              "compares the dense sums in its own memory; the certificate is a pass over every held block at the "
              "mixed weights."]
    return L


if __name__ == "__main__":
    main()
