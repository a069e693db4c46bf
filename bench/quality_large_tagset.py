"""BCFW on Brown with the 472 fine tags: memory of the chain blocks (sparse vs dense transition
statistics) and test accuracy against python-crfsuite's averaged perceptron (issue 11, part 4).

Data, split and features are those of ``bench/gdmm_brown.py`` (imported, not copied): document i
is a test document when i % 5 == 4; the first ``--train`` sentences of the training documents
are held, the first ``--test`` sentences of the test documents are the test set; the same token
features for every method.

Every method runs in its own process so that its peak RSS (``ru_maxrss``) is its own:

* ``bcfw-sparse`` / ``bcfw-dense``: ``SequenceTagger(labels=<472 tags>)`` with the BCFW defaults
  (``BCFW(seed=0)``: lam 1e-3, replay 1, gap sampling, FW steps, averaging) and
  ``chain_stats="sparse"`` / ``"dense"``; the first pass is the stream (``learn_many``), then
  the learner's ``refine(1)`` per further pass (``SequenceTagger.refine`` also computes a
  certificate, 2n oracle calls that observe only: not timed, as AP computes none); after each
  pass (untimed) the test token accuracy;
* ``crfsuite-ap``: averaged perceptron with ``max_iterations`` = 1, 2, ... (one training run
  each; the table shows each run's time).

Times are CPU (``time.process_time``) and wall seconds of learning only (loading and feature
extraction excluded). The machine is shared, so compare the ratios of one run.

``--before COMMIT`` also runs the bcfw methods at that commit (``git archive`` into /tmp; that
tree's own copy of this script and of the library, in a subprocess), for before/after numbers
of one run; ``--chunk N`` feeds the stream N sentences per ``learn_many`` call with a progress
line (CPU, peak RSS, store size) after each, and ``--log FILE`` appends every JSON line to FILE
as it arrives (for the long full-training-set run).

    nice -n 10 python bench/quality_large_tagset.py --train 1000 2000 --test 500 --passes 3
    nice -n 10 python bench/quality_large_tagset.py --train 2000 --passes 2 --methods bcfw-sparse --before 937830c
    nice -n 10 python bench/quality_large_tagset.py --train 100000 --passes 2 --methods bcfw-sparse --chunk 5000 \
        --log full.log --name quality_large_tagset_full_bcfw
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

RESULTS = os.path.join(HERE, "results")


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(method, n_train, n_test, passes, chunk=0):
    """One method in this process; prints one JSON line per measurement (with ``chunk`` > 0 the
    stream is fed ``chunk`` sentences per ``learn_many`` call and a progress line follows each)."""
    import numpy as np
    import gdmm_brown as gb
    import streamssvm as ss
    tr, te, alltags = gb.load("fine", n_train, n_test)
    Xtr, Ytr = [x for x, _ in tr], [y for _, y in tr]
    Xte, Yte = [x for x, _ in te], [y for _, y in te]
    base = {"method": method, "n_train": len(Xtr), "n_test": len(Xte), "tags": len(alltags),
            "tokens_train": int(sum(len(y) for y in Ytr))}
    rss0 = _rss_mb()
    if method.startswith("crfsuite"):
        import pycrfsuite
        for it in range(1, passes + 1):
            trn = pycrfsuite.Trainer(algorithm="ap", verbose=False)
            for x, y in zip(Xtr, Ytr):
                trn.append(pycrfsuite.ItemSequence(x), y)
            trn.set_params({"max_iterations": it})
            path = f"/tmp/qlt_{os.getpid()}.crfsuite"
            c0, w0 = time.process_time(), time.perf_counter()
            trn.train(path)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            tg = pycrfsuite.Tagger()
            tg.open(path)
            acc = gb.accuracy([tg.tag(pycrfsuite.ItemSequence(x)) for x in Xte], Yte)
            tg.close()
            os.remove(path)
            print(json.dumps(base | {"pass": it, "cpu_s": cpu, "wall_s": wall, "test_acc": acc,
                                     "rss_before_mb": rss0, "peak_rss_mb": _rss_mb()}), flush=True)
        return
    name, _, opts = method.partition("@")   # e.g. bcfw-sparse@lam=0.0001: a non-default lambda
    stats = name.split("-")[1]
    kw = {k: float(v) for k, v in (o.split("=") for o in opts.split(",") if o)}
    learner = ss.learners.BCFW(seed=0, chain_stats=stats, **kw)
    # warm-up outside the timed region (numba cache load)
    w = ss.SequenceTagger(learner=learner.clone(), labels=alltags)
    w.learn_many(Xtr[:3], Ytr[:3])
    w.refine(1)
    w.predict_many(Xte[:2])
    del w
    m = ss.SequenceTagger(learner=learner, labels=alltags)
    cpu = wall = 0.0
    step = chunk if chunk > 0 else len(Xtr)
    for a in range(0, len(Xtr), step):
        c0, w0 = time.process_time(), time.perf_counter()
        m.learn_many(Xtr[a:a + step], Ytr[a:a + step])
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        if chunk > 0:
            print(json.dumps(base | {"progress": "stream", "seen": min(a + step, len(Xtr)), "cpu_s": cpu,
                                     "wall_s": wall, "peak_rss_mb": _rss_mb(),
                                     "store_mb": m._learner.store.nbytes() / 2**20}), flush=True)
    lr = m._learner
    for p in range(1, passes + 1):
        acc = gb.accuracy(m.predict_many(Xte), Yte)
        st = lr.store
        print(json.dumps(base | {"pass": p, "cpu_s": cpu, "wall_s": wall, "test_acc": acc,
                                 "rss_before_mb": rss0, "peak_rss_mb": _rss_mb(),
                                 "store_mb": st.nbytes() / 2**20, "store_alloc_mb": st.allocated_bytes() / 2**20,
                                 "weights_mb": (lr.W.E.nbytes + lr._Z.E.nbytes) / 2**20,
                                 "blocks_grown": int(lr.counters[7]) if len(lr.counters) > 7 else 0,
                                 "n_blocks": int(st.n)}), flush=True)
        if p == passes:
            break
        c1, w1 = time.process_time(), time.perf_counter()
        lr.refine(1)   # the learner's refine: the estimator's also certifies (2n oracle calls, an observation)
        cpu += time.process_time() - c1
        wall += time.perf_counter() - w1
        if chunk > 0:
            print(json.dumps(base | {"progress": f"refine pass {p + 1} done", "cpu_s": cpu, "wall_s": wall,
                                     "peak_rss_mb": _rss_mb()}), flush=True)
    if passes >= 1:
        c = m.certificate()
        print(json.dumps(base | {"pass": passes, "certificate_gap": float(c.gap), "primal": float(c.primal)}),
              flush=True)


def ocr_check(passes, repeats, n_train=None):
    """OCR-large (26 tags): the same BCFW runs with sparse and dense chain statistics,
    interleaved in one process (learn the stream, then ``passes - 1`` refine passes); CPU and
    wall seconds of learning, certificate and test error of each."""
    import numpy as np
    import streamssvm as ss
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
    if n_train:
        X_tr, y_tr = X_tr[:n_train], y_tr[:n_train]
    Y_tr = [list(y) for y in y_tr]
    rows = []
    configs = [("defaults", {}), ("pairwise+cache", {"step": "pairwise", "cache": True})]
    for name, kw in configs:
        for stats in ("sparse", "dense"):   # warm-up (numba cache load)
            w = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, chain_stats=stats, **kw))
            w.learn_many(X_tr[:5], Y_tr[:5])
            w.refine(1)
        for rep in range(repeats):
            for stats in (("sparse", "dense") if rep % 2 == 0 else ("dense", "sparse")):
                m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0, chain_stats=stats, **kw))
                c0, w0 = time.process_time(), time.perf_counter()
                m.learn_many(X_tr, Y_tr)
                if passes > 1:
                    m.refine(passes - 1)
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                c = m.certificate()
                pred = m.predict_many(X_te)
                err = 1.0 - sum(int(a == b) for p, y in zip(pred, y_te) for a, b in zip(p, y)) / sum(len(y) for y in y_te)
                r = {"config": name, "chain_stats": stats, "repeat": rep, "passes": passes, "n_train": len(X_tr),
                     "cpu_s": cpu, "wall_s": wall, "gap": float(c.gap), "primal": float(c.primal),
                     "test_error": float(err), "store_mb": m._learner.store.nbytes() / 2**20}
                print(json.dumps(r), flush=True)
                rows.append(r)
    return rows


def before_tree(commit):
    """A checkout of ``commit`` (``git archive`` into /tmp, no change to the repository): the
    "before" runs use that tree's own copy of this script and of the library."""
    root = os.path.join("/tmp", f"qlt_before_{commit}")
    if not os.path.isdir(root):
        os.makedirs(root)
        arch = subprocess.run(["git", "-C", os.path.dirname(HERE), "archive", commit], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", root], input=arch, check=True)
    return root


def run_child(method, n, n_test, passes, timeout, before=None, chunk=0, log=None):
    """One method in a subprocess (``before``: the script and library of that commit; its rows get
    ``@<commit>`` appended to the method). CPU seconds of the child come from its own
    ``time.process_time``; ``child_cpu_s`` is ``getrusage`` of the whole child (loading included).
    With ``log``, the child's JSON lines are appended to that file as they arrive."""
    script, env, label = os.path.abspath(__file__), dict(os.environ), method
    if before:
        root = before_tree(before)
        script = os.path.join(root, "bench", "quality_large_tagset.py")
        env["PYTHONPATH"] = root
        label = f"{method}@{before}"
    cmd = [sys.executable, script, "--child", method, "--train", str(n), "--test", str(n_test), "--passes", str(passes)]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    rows, rc, err = [], None, ""
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            row = json.loads(line) | {"method": label}
            rows.append(row)
            if log:
                with open(log, "a") as f:
                    f.write(json.dumps(row) + "\n")
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                err = "timeout"
                break
        rc = proc.wait()
        err = err or proc.stderr.read()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    if rc is not None and rc < 0 and not err:
        err = "timeout"
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    for row in rows:
        row["child_cpu_s"] = child_cpu
    if rc != 0 or err == "timeout":
        rows.append({"method": label, "n_train": n, "error": (err or "")[-800:], "returncode": rc,
                     "seconds_until_stop": time.perf_counter() - t0})
    return rows


def write_md(res, path):
    lines = ["# BCFW on Brown with 472 fine tags", "",
             f"`{res['command']}`", "", res["note"], "",
             "| method | train sentences | pass / iters | CPU s | wall s | test acc | peak RSS MB | store MB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "error" in r:
            lines.append(f"| {r['method']} | {r['n_train']} | failed: {r['error'][-120:]!r} | | | | | |")
            continue
        if "test_acc" not in r:
            continue
        lines.append(f"| {r['method']} | {r['n_train']} | {r['pass']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
                     f"{r['test_acc']:.4f} | {r['peak_rss_mb']:.0f} | "
                     f"{r.get('store_mb', float('nan')):.1f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--train", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--methods", nargs="+", default=["bcfw-sparse", "bcfw-dense", "crfsuite-ap"])
    ap.add_argument("--no-current", action="store_true", help="with --before: only the runs at that commit")
    ap.add_argument("--dense-max", type=int, default=2000, help="largest run of bcfw-dense (K^2 per block)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--name", default="quality_large_tagset")
    ap.add_argument("--ocr", action="store_true", help="OCR-large sparse vs dense timing instead")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--before", help="also run the bcfw methods at this commit (its own script and library)")
    ap.add_argument("--chunk", type=int, default=0, help="stream in learn_many calls of this many sentences, "
                    "with a progress line after each")
    ap.add_argument("--log", help="append every JSON line to this file as it arrives")
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.train[0], a.test, a.passes, a.chunk)
        return
    if a.ocr:
        rows = ocr_check(a.passes, a.repeats)
        res = {"command": "python bench/quality_large_tagset.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "note": "OCR-large, BCFW sparse vs dense chain statistics, interleaved in one process", "rows": rows}
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, a.name + ".json"), "w") as f:
            json.dump(res, f, indent=1)
        lines = ["# OCR-large: BCFW with sparse vs dense chain statistics", "", f"`{res['command']}`", "",
                 res["note"], "", "| config | chain_stats | repeat | passes | CPU s | wall s | gap | test error | store MB |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['config']} | {r['chain_stats']} | {r['repeat']} | {r['passes']} | {r['cpu_s']:.1f} | "
                         f"{r['wall_s']:.1f} | {r['gap']:.5g} | {r['test_error']:.4f} | {r['store_mb']:.1f} |")
        with open(os.path.join(RESULTS, a.name + ".md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return
    rows = []
    for n in a.train:
        for meth in a.methods:
            if meth.startswith("bcfw-dense") and n > a.dense_max:
                continue
            runs = ([] if a.no_current and a.before else [None]) + ([a.before] if a.before and meth.startswith("bcfw") else [])
            for before in runs:
                got = run_child(meth, n, a.test, a.passes, a.timeout, before=before, chunk=a.chunk, log=a.log)
                for r in got:
                    print(json.dumps(r), flush=True)
                rows += got
    res = {"command": "python bench/quality_large_tagset.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "note": "Brown, 472 fine tags, split/features of bench/gdmm_brown.py; each method in its own process "
                   "(peak RSS = ru_maxrss of that process, which includes loading the corpus); times = learning only.",
           "rows": rows}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, a.name + ".json"), "w") as f:
        json.dump(res, f, indent=1)
    write_md(res, os.path.join(RESULTS, a.name + ".md"))


if __name__ == "__main__":
    main()
