"""Hashes of what ``MulticlassSSVM.predict_learn_many`` (batches of 256, defaults) produces on the
784-d upsampled digits (x3, as ``hotpath.py``'s batch row), on OCR letters as 16-d rows (20k) and
as their 128 binary pixels (10k, the 0/1 path where the column scaling is the identity): the
predictions, the learner's emission weights, ``predict_many`` of the first 500 rows, and the
model's saved state (``checkpoint``'s tree and arrays, without the file's timestamps). Two
checkouts that print the same lines learn bit-identically on these streams.

    python bench/batch_hashes.py [--code DIR]
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def digest(b):
    return hashlib.sha256(b).hexdigest()[:16]


def run(ss, X, y, size=256):
    import numpy as np
    from streamssvm import checkpoint
    m = ss.MulticlassSSVM()
    preds = []
    for a in range(0, len(y), size):
        preds += list(m.predict_learn_many(X[a:a + size], y[a:a + size]))
    W = np.ascontiguousarray(m._learner.emission_weights())
    tree, arrays = checkpoint._split(m.state())
    state = repr(tree).encode() + b"".join(k.encode() + np.ascontiguousarray(v).tobytes()
                                           for k, v in sorted(arrays.items()))
    return {"preds": digest(repr(preds).encode()), "weights": digest(W.tobytes()),
            "predict_many": digest(repr(list(m.predict_many(X[:500]))).encode()), "state": digest(state),
            "rows": len(y)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", default=None, help="import streamssvm from this checkout (default: this one)")
    a = ap.parse_args(argv)
    sys.path.insert(0, a.code or os.path.dirname(HERE))
    sys.path.insert(1, HERE)
    import numpy as np
    import streamssvm as ss
    from hotpath import digits784, ocr16
    print(f"streamssvm from {os.path.dirname(os.path.dirname(ss.__file__))}")
    X, y = digits784(3)
    print("digits784 x3", run(ss, X, y))
    X, y = ocr16(20000)
    print("ocr16", run(ss, X, y))
    Xb = np.unpackbits(X.astype(np.uint8), axis=1).astype(np.float64)
    print("ocr128 bits", run(ss, Xb[:10000], y[:10000]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
