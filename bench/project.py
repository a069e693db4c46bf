"""Projection of distributed BCFW to 8 ... 256 workers from measured costs and pass counts.

    python bench/project.py     # reads bench/results/distributed.json, appends to distributed.md

The model (one worker per machine, a mixer reached over the network; every quantity below is
either measured by ``bench/distributed.py`` on this machine or stated as an assumption):

* rounds to the target gap: the schedule the letters rows ran. With the library's default round
  lengths (``rounds_per_pass`` None in the rows): the stream in rounds of
  ``streamssvm.distributed.default_round_examples(K, n)`` new examples per worker (1/(20 K) pass,
  at most 500), then passes(K) - 1 refinement passes of 20 K rounds each
  (``default_passes_per_round``, n / (20 K^2) block steps per worker a round); with a fixed
  ``rounds_per_pass`` R: passes(K) x R rounds of n / (R K) steps per worker, in the stream as in
  the refinement. passes(K) is the measured curve (the "adaptive"
  mixing rows, K = 1 ... 32, in-process for K > 4); beyond the largest K measured it is
  extrapolated linearly in log2 K from the last two measured points (stated in the table).
  Passes to a fixed gap do not depend on n for fixed lambda (BCFW's rate in passes, Lacoste-Julien,
  Jaggi, Schmidt and Pletscher, "Block-coordinate Frank-Wolfe optimization for structural SVMs",
  ICML 2013), so the curve measured at n = 10,000 is used for the projected n.
* a round's wall time
      T(K) = steps(K) c_step + T_net(K) + T_mix(K) + (n / K) c_cert + T_cut(K) / rounds_per_cut
  with steps(K) the block steps per worker of the round (all workers in parallel; above),
  c_step and c_cert the measured seconds per block step and per certificate oracle call of one
  Ray worker (K = 1 row), T_mix(K) = K b / mix_rate (the mixer adds K arrays of b bytes; rate
  measured from the K = 1 row's mixing), T_cut(K) = the measured per-cut cost of the K = 1 row
  for n / K blocks per worker (parts written in parallel, one per worker), and the network
      T_net(K) = 2 ceil(log2 K) (RTT / 2 + b / bandwidth) + ceil(log2 K) RTT / 2
  (a tree reduce of the weight changes and a broadcast of the mixed weights, b bytes each, plus
  the certificate's scalars going up the same tree).
* examples / s while streaming: a stream round's new examples (K x steps) / T_stream(K), where a stream round
  learns its new examples, mixes and amortizes the cut but computes no certificate.

Validation: the same formula with this machine's 2 cores (compute and certificate time-shared
when K > 2) and the local Ray round trip in place of the network predicts the K = 1, 2, 4 Ray
runs' seconds to the target; the table states the predicted and the measured seconds.
"""
from __future__ import annotations

import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import fmt  # noqa: E402

NETWORK = {"bandwidth_bytes_per_s": 10e9 / 8, "rtt_s": 0.2e-3}
N_PROJECTED = 1_000_000
#: certificates per pass in the projection (snapshot_every = the rounds of 1/20 pass; the library's default
#: certifies every round, which costs a pass over the held blocks per round)
CERT_PER_PASS = 20
WORKERS = (8, 16, 32, 64, 128, 256)


def costs(rows):
    """Unit costs. Learning (CPU seconds, so that other jobs on this machine do not inflate them):
    per block step and per round and worker, fitted on the K = 1 and K = 2 fixed-mixing Ray rows
    (learn CPU per worker to the target = rounds x (steps c_step + c_round)); the rest (wall
    seconds of the K = 1 row, upper bounds on a loaded machine): certificate per oracle call,
    mixing round trip per array, a cut per block held."""
    one = next(r for r in rows if r["workers"] == 1 and r.get("cluster") == "local")
    two = next(r for r in rows if r["workers"] == 2 and r.get("cluster") == "local" and r["mix_step"] == "fixed")
    n, rpp, R = one["n"], one["rounds_per_pass"], one["rounds_to_target"]
    # two equations: cpu_K / R_K = steps_K c_step + c_round for K = 1, 2 (steps_K: the row's mean block steps per
    # worker and round to the target)
    y1, y2 = one["learn_cpu_to_target"] / R, two["learn_cpu_to_target"] / two["rounds_to_target"]
    s1, s2 = mean_steps(one), mean_steps(two)
    c_step = (y1 - y2) / (s1 - s2)
    c_round = y1 - s1 * c_step
    b = one["bytes_per_round"] / 2.0          # K = 1: up + down
    per_cut = one["checkpoint_seconds_per_round"] * one["rounds"] / max(one["cuts"], 1)
    learn_wall = one["seconds_to_target_learn"] / R
    parts = learn_wall + one["mix_seconds_per_round"] + one["certificate_seconds_per_round"] + \
        one["checkpoint_seconds_per_round"]
    c = {"n": n, "rpp": rpp, "bytes": b, "c_step": c_step, "c_round": c_round,
         "c_cert": one["certificate_seconds_per_round"] / n,
         "mix_s_per_byte": one["mix_seconds_per_round"] / b,   # includes the local Ray round trip
         "cut_s_per_block": per_cut / n,
         # validation only: the wall seconds of a learning call beyond its CPU, and the rest of a round
         "wall_per_cpu": one["seconds_to_target_learn"] / one["learn_cpu_to_target"],
         "ray_other": max(one["seconds_to_target"] / R - parts, 0.0),
         "rounds_per_cut": rpp or 20}
    c["c_loss"] = loss_cost(rows, n, c)
    return c


def mean_steps(r):
    """A measured row's block steps per worker and round, to the target (any round schedule)."""
    return r["passes_to_target"] * r["n"] / (int(r["workers"]) * r["rounds_to_target"])


def schedule(c, K, n, passes):
    """[(rounds, block steps per worker a round, rounds per pass of that phase)] to reach ``passes``
    passes over n examples with K workers: the rows' round lengths (module docstring)."""
    if c["rpp"]:
        return [(passes * c["rpp"], n / (c["rpp"] * K), c["rpp"])]
    from streamssvm.distributed import default_passes_per_round, default_round_examples
    per_worker = default_round_examples(K, n)
    stream_rounds = n / (per_worker * K)
    rpp = 1.0 / default_passes_per_round(K)
    return [(stream_rounds, per_worker, stream_rounds), ((passes - 1.0) * rpp, n / (rpp * K), rpp)]


def loss_cost(rows, n, c):
    """Adaptive mixing's extra learning CPU per block held and round (the sums of the blocks'
    losses, the line search's input -- two per round when bench/results/distributed.json was
    measured, one since), from the K = 2 adaptive row with the fitted step and round costs
    subtracted."""
    a = next(r for r in rows if r["workers"] == 2 and r.get("cluster") == "local" and r["mix_step"] == "adaptive")
    per_round = a["learn_cpu_to_target"] / a["rounds_to_target"]
    extra = per_round - mean_steps(a) * c["c_step"] - c["c_round"]
    return max(extra, 0.0) / (n / 2)


def mixer_add_seconds(b, K, repeats=20):
    """Measured: the mixer's own work for K weight changes of b bytes (``combine`` and
    ``overlap``, the functions the mixer runs), median of ``repeats``; no network."""
    import time

    import numpy as np
    from streamssvm.distributed._bcfw import overlap
    from streamssvm.distributed._mix import combine
    rng = np.random.default_rng(0)
    d = [{"E": rng.normal(size=int(b // 8))} for _ in range(K)]
    start = {"E": rng.normal(size=int(b // 8))}
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        combine(start, d, 1.0)
        overlap(d)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def passes_curve(rows, mix_step="adaptive"):
    pts = {1: next(r for r in rows if r["workers"] == "single")["passes_to_target"]}
    for r in rows:
        if r["workers"] != "single" and r.get("mix_step") == mix_step and r["passes_to_target"]:
            pts[int(r["workers"])] = r["passes_to_target"]
    return dict(sorted(pts.items()))


def passes_at(curve, K):
    if K in curve:
        return curve[K], "measured"
    ks = sorted(curve)
    if K < ks[-1]:
        lo = max(k for k in ks if k < K)
        hi = min(k for k in ks if k > K)
        t = (math.log2(K) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return curve[lo] + t * (curve[hi] - curve[lo]), "interpolated"
    a, b = ks[-2], ks[-1]
    slope = (curve[b] - curve[a]) / (math.log2(b) - math.log2(a))
    return curve[b] + slope * (math.log2(K) - math.log2(b)), f"extrapolated from K = {a}, {b}"


def net_seconds(c, K, net):
    """The star the mixer is: K changes of b bytes in over its link, the mixed weights out to K
    workers, one round trip for the round's calls, one for the certificate's scalars."""
    if K == 1:
        return 0.0
    return 2 * net["rtt_s"] + 2 * K * c["bytes"] / net["bandwidth_bytes_per_s"]


_MIXER = {}


def mixer_seconds(c, K):
    if K not in _MIXER:
        _MIXER[K] = mixer_add_seconds(c["bytes"], K)
    return _MIXER[K]


def learn_cpu(c, K, n, adaptive, steps):
    """Learning CPU seconds of one worker in one round of ``steps`` block steps."""
    return steps * c["c_step"] + c["c_round"] + (n / K) * c["c_loss"] * bool(adaptive)


def round_seconds(c, K, n, steps, net=None, cores=None, certify=True, rounds_per_cut=None, adaptive=True):
    """One round's wall time (see the module docstring); ``cores``: a machine of that many cores
    running all K workers (validation: learning wall = CPU x the K = 1 row's wall per CPU, the
    local Ray mixing round trip and dispatch), else one worker per machine and core."""
    share = 1.0 if cores is None else max(1.0, K / cores)
    t = learn_cpu(c, K, n, adaptive, steps) * share * (1.0 if net is not None else c["wall_per_cpu"])
    if net is None:
        t += K * c["bytes"] * c["mix_s_per_byte"] + c["ray_other"]
    else:
        t += mixer_seconds(c, K) + net_seconds(c, K, net)
    if certify:   # True: every round; a number: that fraction of the rounds
        t += (n / K) * c["c_cert"] * share * float(certify)
    t += (n / K) * c["cut_s_per_block"] * share / (rounds_per_cut or c["rounds_per_cut"])
    return t


def main(stem="distributed"):
    """Reads ``bench/results/<stem>.json``, appends the projection to ``<stem>.md``."""
    with open(os.path.join(HERE, "results", stem + ".json")) as f:
        res = json.load(f)
    rows = [r for r in res["rows"] if r["dataset"] == "OCR letters"]
    c = costs(rows)
    curve = passes_curve(rows)
    cores = res["machine"]["cores"]
    lines = ["", "## Projection to 8 ... 256 workers (bench/project.py)", "",
             "Unit costs measured here: learning "
             f"{c['c_step'] * 1e6:.1f} CPU us per block step + {c['c_round'] * 1e3:.2f} CPU ms per round and worker "
             "(fitted on the K = 1 and K = 2 fixed rows), adaptive mixing's loss sums "
             f"{c['c_loss'] * 1e6:.2f} CPU us per block held and round (K = 2 adaptive row); wall seconds of the K = 1 "
             f"row (upper bounds, loaded machine): {c['c_cert'] * 1e6:.1f} us per certificate oracle call, a cut "
             f"{c['cut_s_per_block'] * 1e6:.1f} us per block held, the local Ray mixing round trip "
             f"{c['mix_s_per_byte'] * c['bytes'] * 1e3:.2f} ms per worker and Ray's dispatch {c['ray_other'] * 1e3:.1f} "
             f"ms per round (these two: validation only); {c['bytes'] / 1e3:.1f} kB of weights per worker and "
             f"direction per round. " + (f"Rounds of 1/{c['rpp']} pass" if c["rpp"] else "The library's default "
             "rounds (1/(20 K) pass, at most 500 new examples per worker in the stream)")
             + f"; passes to gap {res['target_gap']} from the "
             "adaptive-mixing rows (K = 1: the single process): "
             + ", ".join(f"K={k}: {fmt(v)}" for k, v in curve.items()) + ".", "",
             "Validation on this machine (2 cores shared with other jobs; all K workers on it, compute and "
             "certificate time-shared past 2 workers, the local Ray round trip instead of a network, the cuts the run "
             "took). Wall time is only as good as the machine was quiet (other helpers' jobs ran during the "
             "measurement; K = 1 is a calibration row); the learning CPU per worker (the compute model alone; K = 1, "
             "K = 2 fixed and K = 2 adaptive are its calibration rows, K = 4 the check) does not depend on them:", "",
             "| workers | mixing | rounds to target | predicted s to target | measured s to target | error | "
             "predicted learn CPU / worker s | measured | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("cluster") != "local" or not r["passes_to_target"]:
            continue
        K = int(r["workers"])
        R = r["rounds_to_target"]
        pred = R * round_seconds(c, K, r["n"], mean_steps(r), cores=cores,
                                 rounds_per_cut=r["rounds"] / max(r["cuts"], 1), adaptive=r["mix_step"] == "adaptive")
        meas = r["seconds_to_target"]
        cpu_pred = R * learn_cpu(c, K, r["n"], r["mix_step"] == "adaptive", mean_steps(r))
        cpu = r["learn_cpu_to_target"]
        lines.append(f"| {K} | beta={r['beta']:g} {r['mix_step']} | {R} | {fmt(pred)} | {fmt(meas)} | "
                     f"{100 * (pred - meas) / meas:+.0f}% | {fmt(cpu_pred)} | {fmt(cpu)} | "
                     f"{100 * (cpu_pred - cpu) / cpu:+.0f}% |")
    lines += ["", f"Projection: n = {N_PROJECTED:,} OCR-letter-like examples (26 classes, 128 pixels), one worker "
              f"per machine, {NETWORK['bandwidth_bytes_per_s'] * 8 / 1e9:g} Gb/s, {NETWORK['rtt_s'] * 1e3:g} ms RTT, "
              "the mixer a star (K changes in, the mixed weights out, 2 RTT per round), a certificate every 1/20 "
              "pass (every round when rounds are longer), a cut every pass; K = 1 is the single process (fixed "
              "mixing, no line search), K > 1 adaptive mixing:",
              "",
              "| workers | passes to target | (source) | round s | of which learning s | mixer + network s | rounds | "
              "s to target | speed-up vs 1 | stream examples/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    def to_target(K, P):
        """(seconds, rounds, the last phase's round s and its learning s, a stream round's examples / s)"""
        secs, rounds = 0.0, 0.0
        for R, steps, rpp in schedule(c, K, N_PROJECTED, P):
            # a certificate every 1/20 pass at most (as the single process; with rounds of 1/20 pass, every round)
            T = round_seconds(c, K, N_PROJECTED, steps, net=NETWORK, adaptive=K > 1, rounds_per_cut=rpp,
                              certify=min(1.0, CERT_PER_PASS / rpp))
            secs, rounds = secs + R * T, rounds + R
        first = schedule(c, K, N_PROJECTED, P)[0]
        Ts = round_seconds(c, K, N_PROJECTED, first[1], net=NETWORK, certify=False, adaptive=K > 1,
                           rounds_per_cut=first[2])
        return secs, rounds, T, learn_cpu(c, K, N_PROJECTED, K > 1, steps), K * first[1] / Ts

    p1, _ = passes_at(curve, 1)
    t1 = to_target(1, p1)[0]
    for K in (1,) + WORKERS:
        P, src = passes_at(curve, K)
        secs, R, T, comp, stream_rate = to_target(K, P)
        netw = net_seconds(c, K, NETWORK) + mixer_seconds(c, K)
        lines.append(f"| {K} | {fmt(P)} | {src} | {fmt(T)} | {fmt(comp)} | {fmt(netw)} | {fmt(R)} | {fmt(secs)} | "
                     f"{fmt(t1 / secs)} | {fmt(stream_rate)} |")
    text = "\n".join(lines) + "\n"
    md = os.path.join(HERE, "results", stem + ".md")
    with open(md) as f:
        body = f.read()
    cut = body.find("\n## Projection to")
    if cut >= 0:
        body = body[:cut].rstrip("\n") + "\n"
    with open(md, "w") as f:
        f.write(body + text)
    print(text)


if __name__ == "__main__":
    main()
