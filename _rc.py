import sys, time, numpy as np
sys.path.insert(0, "bench")
from gdmm_multilabel import rcv1_like
t=time.time()
Xtr, Ytr, Xte, Yte, labels = rcv1_like(int(sys.argv[1]), 200)
print("gen", time.time()-t, np.mean([len(x) for x in Xtr]), Ytr.sum(1).mean(), np.bincount(Ytr.sum(1))[:8], Ytr.sum(0).max(), (Ytr.sum(0)>0).sum())
