"""A plain numpy simulation of step rules for the Crammer-Singer multiclass SVM on the tuning
split of ``bench/memoir_tune.py`` (first ``ntr`` examples of the Brown tag-pair training sample
x 2 epochs, validated on the next ``nv``): no l2 shrinkage, no projection, exact argmax, so
rules can be compared quickly before one is put into ``MEMOIR``.

    nice -n 10 python bench/memoir_sim.py 40000 10000 '[{"rule": "perc"}, {"rule": "pa", "C": 1}]' [bias]

Rules: ``perc`` (multiclass perceptron: step 1 on a mistake), ``sched`` (eta0 / (R^2 (1 +
eta_step t)) on an active hinge, MEMOIR's rule), ``pa`` (passive-aggressive, Crammer, Dekel,
Keshet, Shalev-Shwartz & Singer, "Online Passive-Aggressive Algorithms": min(C / R^2,
hinge / (2 |x|^2)), which brings the margin of the pair (y, r) to 1), ``pa2`` (their PA-II).
``avg``: ``uniform``, ``linear`` (iterate s weighted by s) or ``none``. ``bias``: prepend the
constant feature 1 the estimators add. Prints one JSON line per rule.
"""
import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run(X, y, Xv, yv, K, epochs, rule, avg="uniform", eta0=1.0, eta_step=0.0, C=1.0, margin=1.0):
    n, d = X.shape
    W = np.zeros((K, d))
    Z = np.zeros((K, d))
    A = 0.0
    r2s, r2n, upd, t = 0.0, 0, 0, 0
    for _ in range(epochs):
        for i in range(n):
            x, c = X[i], y[i]
            s = W @ x
            sy = s[c]
            s[c] = -np.inf
            r = int(np.argmax(s))
            xx = float(x @ x)
            r2s += xx
            r2n += 1
            R2 = r2s / r2n
            t += 1
            h = margin + s[r] - sy
            if rule == "perc":
                step = 1.0 if s[r] >= sy else 0.0
            elif h <= 0:
                step = 0.0
            elif rule == "sched":
                step = eta0 / (R2 * (1 + eta_step * (t - 1)))
            elif rule == "pa":
                step = min(C / R2, h / (2 * xx))
            elif rule == "pa2":
                step = h / (2 * xx + R2 / (2 * C))
            else:
                raise ValueError(rule)
            if step > 0:
                upd += 1
                W[c] += step * x
                W[r] -= step * x
                if avg != "none" and A != 0.0:
                    Z[c] += A * step * x
                    Z[r] -= A * step * x
            A += 1.0 if avg == "uniform" else float(t)
    Wp = W if avg == "none" else (A * W - Z) / A
    return float(np.mean(np.argmax(Xv @ Wp.T, axis=1) == yv)), upd / t, float(np.linalg.norm(W))


if __name__ == "__main__":
    from memoir_tune import sample
    X, y, K = sample()
    ntr, nv = int(sys.argv[1]), int(sys.argv[2])
    Xt, yt, Xv, yv = X[:ntr], y[:ntr], X[ntr:ntr + nv], y[ntr:ntr + nv]
    if len(sys.argv) > 4 and sys.argv[4] == "bias":
        Xt = np.hstack([np.ones((len(Xt), 1)), Xt])
        Xv = np.hstack([np.ones((len(Xv), 1)), Xv])
    for cfg in json.loads(sys.argv[3]):
        t0 = time.process_time()
        acc, fr, nw = run(Xt, yt, Xv, yv, K, cfg.pop("epochs", 2), **cfg)
        print(json.dumps({"cfg": cfg, "bias": len(sys.argv) > 4, "val_accuracy": acc, "hinge_active": round(fr, 3),
                          "norm": round(nw, 1), "cpu_s": round(time.process_time() - t0, 1)}), flush=True)
