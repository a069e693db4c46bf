"""Paired A/B of the one-record-at-a-time path, in one process, for changes too small for
separate processes on a shared machine (a few percent; issue 22 item 3).

    python bench/record_path_ab.py --rev dab4817 \\
        --methods streamssvm.blocks:BlockStore.reserve_row,streamssvm.learners.bcfw:BCFW._learn_fifo

Variant ``base``: the listed methods as their source reads at git revision ``--rev`` (each
compiled in its module of this checkout and set on its class; a method of the learners'
``GUARDED`` list gets the thread guard, as the class does); variant ``this``: the checkout as it
is. Two models of each call pattern (``predict_one`` then ``learn_one``; ``predict_learn_one``;
``learn_one`` alone)
take the same stream in chunks of ``--chunk`` records, the variants alternating which goes first,
fresh models every repetition (the first a warm-up). Reported per record, CPU (process time): the
sum over chunks of each chunk's minimum over repetitions (load spikes on a shared machine only
add, so the minimum filters them) and the median of the repetitions' totals.

Data: OCR letters as 16-d rows (20k), the scikit-learn digits upsampled to 784-d (1,797 rows),
river's Phishing dicts (1,250 rows, 9 features), as ``bench/hotpath.py`` loads them.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import ast  # noqa: E402
import importlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]


def base_methods(rev, specs):
    """{(class, name): (this method, base method)} for ``module:Class.method`` specs; a method
    the revision lacks is left as it is."""
    from streamssvm.learners.base import GUARDED, one_thread_at_a_time
    out = {}
    for spec in specs:
        modname, qual = spec.split(":")
        cls_name, meth = qual.split(".")
        mod = importlib.import_module(modname)
        cls = getattr(mod, cls_name)
        path = modname.replace(".", "/") + ".py"
        src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True, capture_output=True,
                             text=True).stdout
        node = next((b for c in ast.walk(ast.parse(src)) if isinstance(c, ast.ClassDef) and c.name == cls_name
                     for b in c.body if isinstance(b, ast.FunctionDef) and b.name == meth), None)
        if node is None:
            continue
        ns = {}
        exec(compile(textwrap.dedent(ast.get_source_segment(src, node)), f"<{rev}:{spec}>", "exec"), mod.__dict__, ns)
        old = ns[meth]
        if meth in GUARDED and getattr(cls.__dict__.get(meth), "_one_thread", False):
            old = one_thread_at_a_time(old)
        out[(cls, meth)] = (cls.__dict__[meth], old)
    return out


def datasets(names):
    from hotpath import digits784, ocr16
    out = {}
    if "ocr16" in names:
        X, y = ocr16(20000)
        out["ocr16"] = list(zip(X, y))
    if "digits784" in names:
        X, y = digits784(1)
        out["digits784"] = list(zip(X, y))
    if "phishing" in names:
        from river import datasets as rd
        out["phishing"] = list(rd.Phishing())
    return out


def sep(m, chunk):
    po, lo = m.predict_one, m.learn_one
    for x, c in chunk:
        po(x)
        lo(x, c)


def plo(m, chunk):
    f = m.predict_learn_one
    for x, c in chunk:
        f(x, c)


def learn(m, chunk):
    lo = m.learn_one
    for x, c in chunk:
        lo(x, c)


CALLS = {"sep": sep, "plo": plo, "learn": learn}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True)
    ap.add_argument("--methods", required=True, help="module:Class.method,...")
    ap.add_argument("--data", default="ocr16,digits784,phishing")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=250)
    ap.add_argument("--calls", default="sep,plo", help="sep (predict_one + learn_one), plo (predict_learn_one), "
                    "learn (learn_one alone)")
    a = ap.parse_args(argv)
    import streamssvm as ss
    swaps = base_methods(a.rev, a.methods.split(","))

    def use(v):
        for (cls, name), (this, base) in swaps.items():
            setattr(cls, name, base if v == "base" else this)

    pt = time.process_time
    for name, data in datasets(a.data.split(",")).items():
        for call in (CALLS[c] for c in a.calls.split(",")):
            per, tot = {"base": [], "this": []}, {"base": [], "this": []}
            for r in range(a.reps + 1):
                ms = {v: ss.MulticlassSSVM() for v in per}
                spent = {v: [] for v in per}
                for i, s in enumerate(range(0, len(data), a.chunk)):
                    for v in (("base", "this") if (i + r) % 2 == 0 else ("this", "base")):
                        use(v)
                        t = pt()
                        call(ms[v], data[s:s + a.chunk])
                        spent[v].append(pt() - t)
                if r:
                    for v in per:
                        per[v].append(spent[v])
                        tot[v].append(sum(spent[v]))
            use("this")
            us = {v: 1e6 * sum(min(c) for c in zip(*per[v])) / len(data) for v in per}
            med = {v: 1e6 * sorted(t)[len(t) // 2] / len(data) for v, t in tot.items()}
            print(f"{name:10s} {call.__name__}: base {us['base']:7.2f}  this {us['this']:7.2f} us/record "
                  f"(x{us['this'] / us['base']:.3f}; medians {med['base']:.2f} / {med['this']:.2f})", flush=True)


if __name__ == "__main__":
    main()
