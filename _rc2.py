import sys, time, numpy as np
sys.path.insert(0, "bench")
import streamssvm as ss
from gdmm_multilabel import rcv1_like
Xtr, Ytr, Xte, Yte, labels = rcv1_like(600, 20)
for name, lr in [("gdmm", ss.learners.GDMM(lam=1e-3, replay=0, seed=0)), ("sgd", ss.learners.SGD(lam=1e-3, seed=0))]:
    m = ss.MultiLabelSSVM(learner=lr, pairwise=True, labels=labels)
    N = 600 if name == "gdmm" else 30
    c = time.process_time()
    for x, y in zip(Xtr[:N], Ytr[:N]):
        m.learn_one(x, {k: bool(v) for k, v in zip(labels, y)})
    t1 = time.process_time() - c
    c = time.process_time()
    if name == "gdmm":
        m.refine(1)
    t2 = time.process_time() - c
    c = time.process_time()
    P = [m.predict_one(x) for x in Xte[:5]]
    t3 = time.process_time() - c
    print(name, "learn/ex ms", 1000 * t1 / N, "refine pass s", t2, "predict/ex s", t3 / 5, flush=True)
