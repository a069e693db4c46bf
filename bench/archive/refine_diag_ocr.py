"""OCR-large (6,251 training words, 626 test words): test error of the BCFW defaults at fixed lambdas
(1e-3 = the old default, lambda n = 6.25; 1/n, lambda n = 1; 3e-5), stream then refine(1) per pass. How the
lam=None default of BCFW (lambda = min(1e-3, AUTO_LAM_N / n)) was checked against small data.

    PYTHONPATH=$PWD nice -n 10 python bench/refine_diag_ocr.py
"""
import time, json, sys
import numpy as np, streamssvm as ss
X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
Y_tr = [list(y) for y in y_tr]
for lam in [1e-3, 1.0 / 6251, 3e-5]:
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, lam=lam))
    c0 = time.process_time()
    m.learn_many(X_tr, Y_tr)
    errs = []
    for p in range(1, 21):
        if p > 1:
            m._learner.refine(1)
        if p in (1, 2, 3, 5, 10, 20):
            pred = m.predict_many(X_te)
            err = 1.0 - sum(int(a == b) for pp, y in zip(pred, y_te) for a, b in zip(pp, y)) / sum(len(y) for y in y_te)
            errs.append((p, round(err, 4)))
    print(json.dumps({"lam": lam, "lam_n": lam * len(X_tr), "n": len(X_tr), "test_error_by_pass": errs, "cpu_s": time.process_time() - c0}), flush=True)
