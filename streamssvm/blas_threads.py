"""BLAS threads around small products: one thread where a product is too small to share.

A per-query BLAS product (``BlasExactMIPS``: one float32 matrix-vector product over every class
row) is memory-bound and takes ~0.1 ms at a few thousand classes; OpenBLAS still splits it over
all its threads, which spin between calls. On a busy machine the spinning threads cost more CPU
than the products (an ``ExtremeClassifier`` training run: 177-259 CPU s with OpenBLAS's default
threads against 25 s with one). :func:`single_thread` runs a block with the BLAS libraries at one
thread when the product has fewer than ``SMALL`` entries, and restores their setting after.

The libraries are found once with ``threadpoolctl`` (installed with scikit-learn; not required:
without it this is a no-op). Setting and restoring the thread count costs ~2 us per call.

>>> import numpy as np
>>> with single_thread(10 * 10):
...     float((np.ones((10, 10)) @ np.ones(10))[0])
10.0
"""
from __future__ import annotations

import contextlib

#: Products with fewer entries (rows x columns) than this run on one BLAS thread (64 MB float32).
SMALL = 1 << 24

_LIBS = None


def _libraries():
    global _LIBS
    if _LIBS is None:
        try:
            from threadpoolctl import ThreadpoolController
            _LIBS = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
        except Exception:   # threadpoolctl missing or unable to inspect the process: leave BLAS alone
            _LIBS = []
    return _LIBS


@contextlib.contextmanager
def single_thread(entries):
    """Run the block with one BLAS thread when ``entries`` (the product's matrix size) is below
    :data:`SMALL`; the libraries' thread counts are restored afterwards."""
    libs = _libraries() if entries < SMALL else ()
    saved = []
    for lib in libs:
        n = lib.get_num_threads()
        if n is not None and n > 1:
            lib.set_num_threads(1)
            saved.append((lib, n))
    try:
        yield
    finally:
        for lib, n in saved:
            lib.set_num_threads(n)
