import sys, time
sys.path.insert(0, "/work/wt/gdmmml"); sys.path.insert(0, "/work/wt/gdmmml/tests")
import numpy as np, streamssvm as ss
import test_gdmm_multilabel as T
from streamssvm.learners.gdmm import GDMM
n, lam, L = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
xs, ys, labels = T._yeast(n); labels = labels[:L]; ys = [{k: y[k] for k in labels} for y in ys]
b = ss.MultiLabelSSVM(learner=ss.learners.BCFW(lam=lam, seed=0), pairwise=True, labels=labels)
g = ss.MultiLabelSSVM(learner=GDMM(lam=lam, rho=3.0, seed=0), pairwise=True, labels=labels)
for x, y in zip(xs, ys):
    b.learn_one(x, y); g.learn_one(x, y)
cb = cg = 0
for p in range(1, 6):
    t = time.process_time(); b.refine(400); tb = time.process_time() - t
    t = time.process_time(); g.refine(40); tg = time.process_time() - t
    cb, cg = b.certificate(), g.certificate()
    print(p * 400, p * 40, f"B P={cb.primal:.6f} D={cb.dual:.6f} gap={cb.gap:.1e} {tb:.1f}s | G P={cg.primal:.6f} Dd={cg.dual:.6f} Dl={cg.extra['dual_local_polytope']:.6f} PLP={T._lp_primal(g):.6f} {tg:.1f}s", flush=True)
