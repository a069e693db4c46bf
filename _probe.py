import time, sys, numpy as np, streamssvm as ss
from river import datasets
rows = list(datasets.Yeast())
labels = list(rows[0][1].keys())
n = int(sys.argv[1]); lam = float(sys.argv[2])
X = np.array([[x[k] for k in x] for x, _ in rows[:1500]])
mu, sd = X.mean(0), X.std(0) + 1e-12
def feats(x):
    v = (np.array(list(x.values())) - mu) / sd
    d = {f"f{j}": float(v[j]) for j in range(len(v))}
    d["bias"] = 1.0
    return d
tr = [(feats(x), y) for x, y in rows[:n]]
def run(learner, passes, every):
    m = ss.MultiLabelSSVM(learner=learner, pairwise=True, labels=labels)
    t = time.process_time()
    for x, y in tr: m.learn_one(x, y)
    out = []
    for p in range(passes):
        m.refine(1)
        if (p + 1) % every == 0:
            c = m.certificate(); out.append((p + 1, round(time.process_time() - t, 1), c.primal, c.dual, c.gap))
            print(type(learner).__name__, out[-1], c.extra.get("consistency_residual"), c.extra.get("dual_local_polytope"), flush=True)
    return m
which = sys.argv[3]
if which == "bcfw":
    run(ss.learners.BCFW(lam=lam, seed=0), int(sys.argv[4]), int(sys.argv[5]))
else:
    run(ss.learners.GDMM(lam=lam, rho=float(sys.argv[6]), seed=0, grow=int(sys.argv[7])), int(sys.argv[4]), int(sys.argv[5]))
