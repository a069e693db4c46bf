"""bench/results/distributed.{json,md} in one command: ``python bench/distributed.py --all``.

    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/distributed.py --all
    python3 bench/distributed.py --all --quick                         # smoke run: distributed_quick.{json,md}
    python3 bench/distributed.py --all --parts multinode,projection    # re-measure some parts only

Parts, in order (each states its own protocol in its script):

1. ``letters``: ``bench/distributed.py``'s OCR-letters table (10,000 letters, gap 0.1, Ray K = 1, 2,
   4 on this machine, in process K = 8 ... 32, the library's default round lengths), with its
   per-round wall split (learn, mix, certificate, cut, the rest: Ray's dispatch and the driver)
   of the Ray rows.
2. ``chains``: ``bench/distributed_chains.py`` with the library's default round lengths, averaging
   off and on, K = 2, 4, 8 in process, on 2,000 OCR words (gap 0.2) and 2,000 Brown sentences (40 coarse
   tags, gap 0.1), against one process.
3. ``multinode``: the multi-node kill test (``tests/test_distributed_multinode.py``: a Ray
   ``Cluster`` of a CPU-less head and two 1-CPU nodes, the node of worker 1 removed mid-run, the
   job finishing exactly-once), its result and wall / CPU seconds.
4. ``projection``: ``bench/project.py`` on the letters rows (appended to the markdown).

A part not in ``--parts`` is taken from the existing ``distributed.json``. The section
``## Notes`` of the existing ``distributed.md`` (written by hand after a run) is kept as it is,
before the projection.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from _common import fmt  # noqa: E402

#: chain sets of part 2: (brown, target)
CHAIN_SETS = ((False, 0.2), (True, 0.1))
CHAIN_CONFIGS = ("default", "default avg")
NOTES = "\n## Notes"


def _split_rows(rows):
    """The per-round wall split of the Ray rows (means over the rounds of each run)."""
    lines = ["", "## Per-round overhead split (Ray rows of the letters table)", "",
             "Mean wall seconds per round of the run (all rounds, to the target or the pass limit) and the share "
             "of each part: learn (the workers' rounds, in parallel), mix (the deltas to the mixer, the mixed "
             "weights back, the blend), certificate (the workers' block sums at the mixed weights), cut (parts "
             "written, verified and committed; every pass), the rest (Ray's dispatch and the driver).", "",
             "| workers | mixing | rounds | round s | learn | mix | certificate | cut | rest |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = r.get("round_split")
        if r.get("cluster") != "local" or not sp:
            continue
        tot = sp["round"]
        cells = [f"{fmt(sp[k])} ({100 * sp[k] / tot:.0f}%)" for k in ("learn", "mix", "certificate", "cut", "rest")]
        lines.append(f"| {r['workers']} | beta={r['beta']:g} {r['mix_step']} | {r['rounds']} | {fmt(tot)} | "
                     + " | ".join(cells) + " |")
    return lines


def _chains(quick):
    import distributed_chains as dc
    out = []
    for brown, target in CHAIN_SETS:
        t0, c0 = time.perf_counter(), time.process_time()
        stem, res, _ = dc.measure(brown=brown, quick=quick, names=CHAIN_CONFIGS, target=target)
        res["wall_seconds"], res["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
        out.append(res)
    return out


def _chain_lines(chains):
    lines = ["", "## Chains: passes to a gap, averaging off and on (bench/distributed_chains.py)", "",
             "In process (the Ray rounds bit for bit: pass counts), the library's default round lengths (the stream "
             "and the refinement in rounds of 1/(20 K) pass, at most 500 new examples per worker in the stream), "
             "adaptive mixing, lam = 0.01, normalized Hamming loss, replay 0, uniform FW steps, no gap passes, at "
             "most 15 passes; a certificate every 1/20 pass in every run. Averaging on: the gap of the model the "
             "job returns (the mixer's average of the mixed points, its own certificate()), against one process "
             "averaging its iterates; off: the mixed iterate's (the job's global certificate).", "",
             "| data | target | averaging | single | K=2 | K=4 | K=8 | CPU s (all runs) |", "|---|---|---|---|---|---|---|---|"]
    for res in chains:
        for avg in (False, True):
            rows = [r for r in res["rows"] if r["averaging"] == avg]
            single = next((r for r in rows if r["workers"] == "single"), None)
            if single is None:
                continue
            s_ = single["passes_to_target"]
            cells = []
            for K in (2, 4, 8):
                r = next((r for r in rows if r["workers"] == K), None)
                if r is None:
                    cells.append("")
                elif r["passes_to_target"] is None:
                    cells.append(f"— ({fmt(r['final_gap'])})")
                else:
                    cells.append(f"{fmt(r['passes_to_target'])} ({fmt(r['passes_to_target'] / s_) if s_ else '—'}x)")
            lines.append(f"| {res['dataset']} {res['n']} | {res['target']} | {'on' if avg else 'off'} | {fmt(s_)} | "
                         + " | ".join(cells) + f" | {fmt(sum(r['cpu_seconds'] for r in rows))} |")
    return lines


def _multinode():
    """Runs the multi-node kill test in a subprocess: result, wall and CPU seconds."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-p", "no:cacheprovider",
                        "tests/test_distributed_multinode.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = [ln.strip() for ln in p.stdout.splitlines() if " passed" in ln or " failed" in ln or " error" in ln]
    return {"returncode": p.returncode, "passed": p.returncode == 0, "summary": tail[-1] if tail else p.stdout[-300:],
            "wall_seconds": wall, "cpu_seconds": cpu}


def _multinode_lines(m):
    return ["", "## Multi-node kill test", "",
            "`tests/test_distributed_multinode.py` on a `ray.cluster_utils.Cluster` (a CPU-less head, two 1-CPU "
            "nodes, each its own raylet and object store) with the Tansu broker: the two workers sit on different "
            "nodes; the node of worker 1 is removed after round 4 (its raylet and processes end) and a fresh node "
            "joins; the job restarts from the cut of round 3 and must end with the counts, Kafka offsets, weights and "
            "certificate of an uninterrupted run.", "",
            f"Result of this run: **{'passed' if m['passed'] else 'FAILED'}** (`{m['summary']}`), "
            f"{m['wall_seconds']:.0f} s wall (the cluster's start and the broker included), {m['cpu_seconds']:.0f} s "
            "CPU of the pytest process (Ray's raylets and workers run detached: not counted)."]


def _notes(path):
    """The hand-written ``## Notes`` section of the existing markdown (up to the projection)."""
    if not os.path.exists(path):
        return []
    body = open(path).read()
    i = body.find(NOTES)
    if i < 0:
        return []
    j = body.find("\n## Projection to", i)
    return body[i:(j if j >= 0 else len(body))].rstrip("\n").splitlines()


def report(args, measure_letters):
    """Measure the parts of ``args.parts`` and write bench/results/distributed.{json,md}."""
    import argparse
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    name = "distributed_quick" if args.quick else "distributed"   # a smoke run keeps the results
    stem = os.path.join(HERE, "results", name)
    prev = json.load(open(stem + ".json")) if os.path.exists(stem + ".json") else {}
    t0, c0 = time.perf_counter(), time.process_time()
    if "letters" in parts:
        la = argparse.Namespace(**{**vars(args), "all": False, "words": False, "inprocess": None})
        _, out, lines = measure_letters(la)
    else:
        out = {k: v for k, v in prev.items() if k not in ("chains", "multinode", "report")}
        lines = prev.get("report", {}).get("letters_lines", [])
    out["report"] = {"letters_lines": lines}
    out["chains"] = _chains(args.quick) if "chains" in parts else prev.get("chains", [])
    out["multinode"] = _multinode() if "multinode" in parts else prev.get("multinode")
    out["report"].update({"command": "python bench/distributed.py --all" + (" --quick" if args.quick else ""),
                          "parts": sorted(parts), "wall_seconds": time.perf_counter() - t0,
                          "driver_cpu_seconds": time.process_time() - c0,
                          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    md = list(lines)
    md += ["", f"Written by `python bench/distributed.py --all` ({out['report']['date']}; the parts measured in "
           f"this run: {', '.join(sorted(parts))}; {out['report']['wall_seconds'] / 60:.0f} min wall)."]
    md += _split_rows(out.get("rows", []))
    if out["chains"]:
        md += _chain_lines(out["chains"])
    if out["multinode"]:
        md += _multinode_lines(out["multinode"])
    notes = _notes(stem + ".md")
    if notes:
        md += [""] + notes
    with open(stem + ".json", "w") as f:
        json.dump(out, f, indent=1, default=float)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    if "projection" in parts:
        import project
        one = [r for r in out.get("rows", []) if r.get("cluster") == "local" and r["workers"] in (1, 2)]
        if len(one) < 3 or any(r["passes_to_target"] is None for r in one):
            print("projection skipped: the K = 1 and K = 2 Ray rows did not reach the target", file=sys.stderr)
        else:
            project.main(name)


def round_split(history):
    """Mean seconds per round of a run's history: the round and its learn / mix / certificate /
    cut parts, the rest (dispatch, the driver)."""
    if not history:
        return None
    m = {k: float(np.mean([h.get(f, 0.0) or 0.0 for h in history])) for k, f in (
        ("round", "seconds"), ("learn", "seconds_learn"), ("mix", "seconds_mix"),
        ("certificate", "seconds_certificate"), ("cut", "seconds_checkpoint"))}
    m["rest"] = max(m["round"] - m["learn"] - m["mix"] - m["certificate"] - m["cut"], 0.0)
    return m
