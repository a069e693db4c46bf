"""Projection of distributed BCFW to 8 ... 256 workers from measured costs and pass counts.

    python bench/project.py     # reads bench/results/distributed.json, appends to distributed.md

The model (one worker per machine, a mixer reached over the network; every quantity below is
either measured by ``bench/distributed.py`` on this machine or stated as an assumption):

* rounds to the target gap R(K) = passes(K) x rounds_per_pass -- every round is 1 / rounds_per_pass
  pass, in the stream as in the refinement. passes(K) is the measured curve (the "adaptive"
  mixing rows, K = 1 ... 32, in-process for K > 4); beyond the largest K measured it is
  extrapolated linearly in log2 K from the last two measured points (stated in the table).
  Passes to a fixed gap do not depend on n for fixed lambda (BCFW's rate in passes, Lacoste-Julien,
  Jaggi, Schmidt and Pletscher, "Block-coordinate Frank-Wolfe optimization for structural SVMs",
  ICML 2013), so the curve measured at n = 10,000 is used for the projected n.
* a round's wall time
      T(K) = steps(K) c_step + T_net(K) + T_mix(K) + (n / K) c_cert + T_cut(K) / rounds_per_cut
  with steps(K) = n / (rounds_per_pass K) block steps per worker (all workers in parallel),
  c_step and c_cert the measured seconds per block step and per certificate oracle call of one
  Ray worker (K = 1 row), T_mix(K) = K b / mix_rate (the mixer adds K arrays of b bytes; rate
  measured from the K = 1 row's mixing), T_cut(K) = the measured per-cut cost of the K = 1 row
  for n / K blocks per worker (parts written in parallel, one per worker), and the network
      T_net(K) = 2 ceil(log2 K) (RTT / 2 + b / bandwidth) + ceil(log2 K) RTT / 2
  (a tree reduce of the weight changes and a broadcast of the mixed weights, b bytes each, plus
  the certificate's scalars going up the same tree).
* examples / s while streaming: (n / rounds_per_pass) / T_stream(K), where a stream round
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
WORKERS = (8, 16, 32, 64, 128, 256)


def costs(rows):
    """Per-unit costs from the K = 1 Ray row (seconds): means over the rounds up to the target."""
    one = next(r for r in rows if r["workers"] == 1 and r.get("cluster") == "local")
    n, rpp, R = one["n"], one["rounds_per_pass"], one["rounds_to_target"]
    b = one["bytes_per_round"] / 2.0          # K = 1: up + down
    per_cut = one["checkpoint_seconds_per_round"] * one["rounds"] / max(one["cuts"], 1)
    learn = one["seconds_to_target_learn"] / R
    parts = learn + one["mix_seconds_per_round"] + one["certificate_seconds_per_round"] + \
        one["checkpoint_seconds_per_round"]
    return {"n": n, "rpp": rpp, "bytes": b,
            "c_step": learn / (n / rpp),
            "c_cert": one["certificate_seconds_per_round"] / n,
            "mix_s_per_byte": one["mix_seconds_per_round"] / b,   # includes the local Ray round trip
            "cut_s_per_block": per_cut / n,
            # the rest of a round on Ray (dispatching the calls, results): validation only
            "ray_other": max(one["seconds_to_target"] / R - parts, 0.0),
            "rounds_per_cut": rpp, "c_loss": loss_cost(rows, n)}


def loss_cost(rows, n):
    """Adaptive mixing's extra per-round work: sum_i L_i over the held blocks at the round's start
    and end (the line search's input), seconds per block -- calibrated from the K = 2 Ray rows
    (adaptive minus fixed mean learn seconds per round), checked on K = 4."""
    two = {r["mix_step"]: r for r in rows if r["workers"] == 2 and r.get("cluster") == "local"}
    a, f = two["adaptive"], two["fixed"]
    extra = a["seconds_to_target_learn"] / a["rounds_to_target"] - f["seconds_to_target_learn"] / f["rounds_to_target"]
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


def round_seconds(c, K, n, net=None, cores=None, certify=True, rounds_per_cut=None, adaptive=True):
    """One round's wall time (see the module docstring); ``cores``: a machine of that many cores
    running all K workers (validation), else one worker per machine; ``net`` None: the local Ray
    round trip measured in the mixing cost."""
    share = 1.0 if cores is None else max(1.0, K / cores)
    steps = n / (c["rpp"] * K)
    t = steps * c["c_step"] * share + (n / K) * c["c_loss"] * share * bool(adaptive)
    if net is None:
        t += K * c["bytes"] * c["mix_s_per_byte"]       # local Ray: the measured mixing round trip
    else:
        t += mixer_seconds(c, K) + net_seconds(c, K, net)
    if certify:
        t += (n / K) * c["c_cert"] * share
    t += (n / K) * c["cut_s_per_block"] * share / (rounds_per_cut or c["rounds_per_cut"])
    if net is None:
        t += c["ray_other"]
    return t


def main():
    with open(os.path.join(HERE, "results", "distributed.json")) as f:
        res = json.load(f)
    rows = [r for r in res["rows"] if r["dataset"] == "OCR letters"]
    c = costs(rows)
    curve = passes_curve(rows)
    cores = res["machine"]["cores"]
    lines = ["", "## Projection to 8 ... 256 workers (bench/project.py)", "",
             "Measured unit costs (K = 1 Ray worker, this machine): "
             f"{c['c_step'] * 1e6:.1f} us per block step, {c['c_cert'] * 1e6:.1f} us per certificate oracle call, "
             f"{c['c_loss'] * 1e6:.2f} us per block held for adaptive mixing's loss sums (K = 2 rows), "
             f"{c['bytes'] / 1e3:.1f} kB of weights per worker and direction per round, mixing "
             f"{c['mix_s_per_byte'] * c['bytes'] * 1e3:.2f} ms per worker's array (local Ray round trip included), "
             f"a cut {c['cut_s_per_block'] * 1e6:.1f} us per block held, Ray's own dispatch {c['ray_other'] * 1e3:.1f} "
             "ms per round (validation only). Rounds of 1/{c['rpp']} pass; passes to "
             f"gap {res['target_gap']} from the adaptive-mixing rows (K = 1: the single process): "
             + ", ".join(f"K={k}: {fmt(v)}" for k, v in curve.items()) + ".", "",
             "Validation on this machine (2 cores shared with other jobs; all K workers on it, compute and "
             "certificate time-shared past 2 workers, the local Ray round trip instead of a network, the cuts the run "
             "took):", "",
             "| workers | mixing | rounds to target | predicted s to target | measured s to target | error |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("cluster") != "local" or not r["passes_to_target"]:
            continue
        K = int(r["workers"])
        R = r["rounds_to_target"]
        pred = R * round_seconds(c, K, r["n"], cores=cores, rounds_per_cut=r["rounds"] / max(r["cuts"], 1),
                                 adaptive=r["mix_step"] == "adaptive")
        meas = r["seconds_to_target"]
        lines.append(f"| {K} | beta={r['beta']:g} {r['mix_step']} | {R} | {fmt(pred)} | {fmt(meas)} | "
                     f"{100 * (pred - meas) / meas:+.0f}% |")
    lines += ["", f"Projection: n = {N_PROJECTED:,} OCR-letter-like examples (26 classes, 128 pixels), one worker "
              f"per machine, {NETWORK['bandwidth_bytes_per_s'] * 8 / 1e9:g} Gb/s, {NETWORK['rtt_s'] * 1e3:g} ms RTT, "
              "the mixer a star (K changes in, the mixed weights out, 2 RTT per round), a certificate every round, "
              "a cut every pass; K = 1 is the single process (fixed mixing, no line search), K > 1 adaptive mixing:",
              "",
              "| workers | passes to target | (source) | round s | of which learning s | mixer + network s | rounds | "
              "s to target | speed-up vs 1 | stream examples/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    p1, _ = passes_at(curve, 1)
    t1 = p1 * c["rpp"] * round_seconds(c, 1, N_PROJECTED, net=NETWORK, adaptive=False)
    for K in (1,) + WORKERS:
        P, src = passes_at(curve, K)
        T = round_seconds(c, K, N_PROJECTED, net=NETWORK, adaptive=K > 1)
        comp = N_PROJECTED / (c["rpp"] * K) * c["c_step"] + (N_PROJECTED / K) * c["c_loss"] * (K > 1)
        netw = net_seconds(c, K, NETWORK) + mixer_seconds(c, K)
        R = P * c["rpp"]
        Ts = round_seconds(c, K, N_PROJECTED, net=NETWORK, certify=False, adaptive=K > 1)
        lines.append(f"| {K} | {fmt(P)} | {src} | {fmt(T)} | {fmt(comp)} | {fmt(netw)} | {fmt(R)} | {fmt(R * T)} | "
                     f"{fmt(t1 / (R * T))} | {fmt(N_PROJECTED / c['rpp'] / Ts)} |")
    text = "\n".join(lines) + "\n"
    md = os.path.join(HERE, "results", "distributed.md")
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
