"""Class-major E/Z in a multiclass learner's batch kernel (issue 22, 784-d batches), paired in one
process: ``MulticlassSSVM.predict_learn_many`` in batches of 256 on the 784-d upsampled digits
(``hotpath.py``'s batch row), with the learner's batch kernel as it chooses it
(``bcfw.learn_new_blocks_cm`` for these rows: E and ZE class-major for the call) and forced to the
row-major ``learn_new_blocks`` (main's kernel), alternated rep by rep. CPU us per example for the
whole ``predict_learn_many`` and for the learn kernel's calls alone; the two runs' predictions and
weights are checked equal to the bit.

    python bench/ez_major.py [--reps 5] [--passes 3]
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(1, HERE)

import numpy as np  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--data", choices=("digits784", "ocr16", "digits64"), default="digits784",
                    help="784-d upsampled digits (default), OCR letters as 16-d rows (20k, 26 classes) or the "
                         "8x8 digits (64-d, x3)")
    a = ap.parse_args(argv)
    import streamssvm as ss
    from streamssvm._kernels import bcfw as K
    from hotpath import digits, digits784, ocr16
    X, y = {"digits784": lambda: digits784(a.passes), "ocr16": lambda: ocr16(20000),
            "digits64": lambda: digits(a.passes)}[a.data]()
    cm = K.learn_new_blocks_cm
    spent = [0.0]

    def timed(kern):
        def call(*args):
            t = time.process_time()
            r = kern(*args)
            spent[0] += time.process_time() - t
            return r
        return call

    def run(kern):
        K.learn_new_blocks_cm = timed(kern)
        K.learn_new_blocks, rm = timed(K.learn_new_blocks), K.learn_new_blocks
        spent[0] = 0.0
        m = ss.MulticlassSSVM()
        preds = []
        t0, w0 = time.process_time(), time.perf_counter()
        for s in range(0, len(y), a.size):
            preds += list(m.predict_learn_many(X[s:s + a.size], y[s:s + a.size]))
        t1, w1 = time.process_time(), time.perf_counter()
        K.learn_new_blocks_cm, K.learn_new_blocks = cm, rm
        W = np.ascontiguousarray(m._learner.emission_weights())
        return (t1 - t0) / len(y) * 1e6, (w1 - w0) / len(y) * 1e6, spent[0] / len(y) * 1e6, preds, W

    names = {"row-major (learn_new_blocks, main)": K.learn_new_blocks, "class-major (learn_new_blocks_cm)": cm}
    res = {k: [] for k in names}
    out = {}
    for rep in range(a.reps + 1):   # the first: compilation
        for k, kern in (names.items() if rep % 2 == 0 else reversed(list(names.items()))):
            r = run(kern)
            out[k] = r[3:]
            if rep:
                res[k].append(r[:3])
    same = out[list(names)[0]][0] == out[list(names)[1]][0] and np.array_equal(
        out[list(names)[0]][1].view(np.int64), out[list(names)[1]][1].view(np.int64))
    print(f"predict_learn_many, batches of {a.size}, {len(y)} rows of {a.data}, "
          f"median of {a.reps} (alternated), us per example:")
    print(f"  {'kernel':36s} {'CPU':>7s} {'wall':>7s} {'learn kernel CPU':>17s}")
    for k, v in res.items():
        v = np.array(v)
        print(f"  {k:36s} {np.median(v[:, 0]):7.2f} {np.median(v[:, 1]):7.2f} {np.median(v[:, 2]):17.2f}")
    print(f"  bit-identical predictions and weights: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
