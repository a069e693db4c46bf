"""OCR words as a stream into a SequenceTagger, with exact duality-gap snapshots.

    python examples/ocr_stream.py
"""
import time

import numpy as np

import streamssvm as ss


def test_error(tagger, X, Y):
    pred = tagger.predict_many(X)
    return float(np.mean(np.concatenate([np.asarray(p) != y for p, y in zip(pred, Y)])))


def main():
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
    tagger = ss.SequenceTagger(
        learner=ss.learners.BCFW(lam=1e-3, replay=2, sampling="gap", seed=0), labels=list(range(26)),
        loss="normalized")   # the BCFW papers' OCR loss: P(0) = 1
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(zip(X_tr, y_tr), 1):
        tagger.learn_one(x, list(y))
        if i % 1000 == 0:
            c = tagger.certificate()
            print(f"{i:5d} words  gap {c.gap:.4f}  primal {c.primal:.4f}  test error "
                  f"{test_error(tagger, X_te, y_te):.4f}  ({time.perf_counter() - t0:.1f}s)")
    for passes in (5, 10, 20):
        c = tagger.refine(passes=5, certify=True)
        print(f"refined: gap {c.gap:.4f}  test error {test_error(tagger, X_te, y_te):.4f}  "
              f"({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
