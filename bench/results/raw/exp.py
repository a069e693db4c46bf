import sys, time, json, argparse
sys.path.insert(0, "/work/wt/gdmmml"); sys.path.insert(0, "/work/wt/gdmmml/bench")
import numpy as np
import streamssvm as ss
from gdmm_multilabel import load_yeast, as_dict
ap = argparse.ArgumentParser()
ap.add_argument("learner"); ap.add_argument("--n", type=int, default=300); ap.add_argument("--lam", type=float, default=1.0)
ap.add_argument("--passes", type=int, default=40); ap.add_argument("--every", type=int, default=10)
ap.add_argument("--kw", default="{}")
a = ap.parse_args()
Xtr, Ytr, Xte, Yte, labels = load_yeast()
kw = json.loads(a.kw)
lr = ss.learners.GDMM(lam=a.lam, seed=0, **kw) if a.learner == "gdmm" else ss.learners.BCFW(lam=a.lam, seed=0, **kw)
m = ss.MultiLabelSSVM(learner=lr, pairwise=True, labels=labels)
c0 = time.process_time()
for x, y in zip(Xtr[:a.n], Ytr[:a.n]):
    m.learn_one(as_dict(x), {k: bool(v) for k, v in zip(labels, y)})
cpu = time.process_time() - c0
for p in range(1, a.passes + 1):
    c0 = time.process_time(); m.refine(1); cpu += time.process_time() - c0
    if p % a.every == 0:
        c = m.certificate()
        ex = {k: round(v, 5) for k, v in c.extra.items() if k in ("dual_local_polytope", "consistency_residual", "active_factors")}
        print(f"{a.learner} {a.kw} p={p} cpu={cpu:.1f} P={c.primal:.6f} D={c.dual:.6f} gap={c.gap:.2e} {ex}", flush=True)
if a.learner == "gdmm" or True:
    from gdmm_multilabel import lp_primal
    xs = [as_dict(x) for x in Xtr[:a.n]]
    print(f"{a.learner} {a.kw} final P_LP(w)={lp_primal(m, xs, Ytr[:a.n], a.lam):.6f}", flush=True)
