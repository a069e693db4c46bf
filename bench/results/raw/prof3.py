import sys, time, json
sys.path.insert(0, "."); sys.path.insert(0, "bench")
import numpy as np, streamssvm as ss
from gdmm_multilabel import rcv1_like, scores
Xtr, Ytr, Xte, Yte, labels = rcv1_like(300, 40)
for rho in [float(r) for r in sys.argv[1:]]:
    m = ss.MultiLabelSSVM(learner=ss.learners.GDMM(lam=1e-4, rho=rho, replay=0, seed=0), pairwise=True, labels=labels)
    t = time.process_time()
    for x, y in zip(Xtr, Ytr):
        m.learn_one(x, {k: bool(v) for k, v in zip(labels, y)})
    m.refine(5)
    cpu = time.process_time() - t
    ml = m._learner._ml
    K = 228
    neg = ml.Y[:300, :K] == 0
    P = np.array([[bool(p.get(k, False)) for k in labels] for p in map(m.predict_one, Xte)])
    print(json.dumps({"rho": rho, "cpu_s": cpu, "mean_u_neg": float(ml.u[:300, :K][neg].mean()),
                      "mean_1-u_pos": float(1 - ml.u[:300, :K][~neg].mean()), "sum_abs_T": float(np.abs(ml.T).sum()),
                      "active_factors_per_ex": float(ml.fcnt[:300].mean()), **scores(P, Yte)}), flush=True)
