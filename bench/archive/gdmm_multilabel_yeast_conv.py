"""Yeast (river's copy, file order), first 300 examples, all 14 labels, lam = 1: GDMM defaults,
exact certificate every 10 passes (one JSON line each on stdout). Used to compare two versions of
the code on the same data (run it with each version on PYTHONPATH):

    PYTHONPATH=$PWD python bench/gdmm_multilabel_yeast_conv.py [rho]
"""
import itertools, json, sys, time
import numpy as np
import streamssvm as ss
from river import datasets
print(ss.__file__, file=sys.stderr)
rows = list(itertools.islice(datasets.Yeast(), 300))
feats = sorted(rows[0][0])
X = np.array([[x[f] for f in feats] for x, _ in rows])
X = (X - X.mean(0)) / (X.std(0) + 1e-12)
xs = [dict({f"f{j}": float(v) for j, v in enumerate(r)}, one=1.0) for r in X]
ys = [y for _, y in rows]
labels = sorted(rows[0][1])
rho = float(sys.argv[1]) if len(sys.argv) > 1 else None   # optional: GDMM rho (default: the learner's)
m = ss.MultiLabelSSVM(learner=ss.learners.GDMM(lam=1.0, seed=0, **({} if rho is None else {"rho": rho})), pairwise=True,
                      labels=labels)
c0 = time.process_time()
for x, y in zip(xs, ys):
    m.learn_one(x, y)
cpu = time.process_time() - c0
out = []
for p in range(0, 61, 10):
    if p:
        c0 = time.process_time(); m.refine(10); cpu += time.process_time() - c0
    c = m.certificate()
    rec = dict(passes=p, cpu_s=cpu, primal=c.primal, dual=c.dual, gap=c.gap, dual_local=c.extra["dual_local_polytope"],
               resid=c.extra["consistency_residual"], active=c.extra["active_factors"])
    out.append(rec)
    print(json.dumps(rec), flush=True)
