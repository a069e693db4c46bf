"""Cold start: the CPU seconds from an empty kernel cache to the first prediction, per estimator.

Each measurement is a fresh child process with an empty numba cache (``STREAMSSVM_CACHE`` and
``NUMBA_CACHE_DIR`` in a new temporary folder) that imports streamssvm, builds the estimator with
its defaults, learns two records and predicts one; the child's CPU (user + system, from
``getrusage(RUSAGE_CHILDREN)``) and wall seconds are the result. The measured checkouts' Python
bytecode is compiled beforehand (``compileall``), as an installed package has it (pip compiles it
at install): the measure is numba's compiling, not the interpreter's (the children do not write
bytecode, so a checkout without it compiled every module again in every child: ~0.5 CPU s). The same child with the kernels
cached (a second process on the same folder) and river's ``LogisticRegression`` (import, two
``learn_one``, one ``predict_one``) are measured in the same run for scale. BLAS on one thread.

    python bench/cold_start.py [--reps 3] [--code DIR] [--out bench/results/cold_start]

``--code DIR`` measures the streamssvm of another checkout (a before/after pair: run it twice, or
give ``--before DIR``, measured in the same minutes, alternated).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: the child of each estimator: its defaults, two learn_one, one predict_one
CHILDREN = {
    "MulticlassSSVM": ("from streamssvm import MulticlassSSVM as E\nm = E()\n"
                       "m.learn_one({'a': 1.0, 'b': 0.5}, 'x')\nm.learn_one({'a': 0.2, 'c': 1.0}, 'y')\n"
                       "print(m.predict_one({'a': 1.0}))"),
    "SequenceTagger": ("from streamssvm import SequenceTagger as E\nm = E()\n"
                       "m.learn_one([{'w=the': 1.0}, {'w=cat': 1.0}], ['D', 'N'])\n"
                       "m.learn_one([{'w=a': 1.0}, {'w=dog': 1.0}, {'w=runs': 1.0}], ['D', 'N', 'V'])\n"
                       "print(m.predict_one([{'w=the': 1.0}, {'w=dog': 1.0}]))"),
    "MultiLabelSSVM": ("from streamssvm import MultiLabelSSVM as E\nm = E()\n"
                       "m.learn_one({'a': 1.0, 'b': 0.5}, {'x': True, 'y': False})\n"
                       "m.learn_one({'a': 0.2, 'c': 1.0}, {'x': False, 'y': True})\n"
                       "print(m.predict_one({'a': 1.0}))"),
    "ExtremeClassifier": ("from streamssvm import ExtremeClassifier as E\nm = E()\n"
                          "m.learn_one({'a': 1.0, 'b': 0.5}, 'x')\nm.learn_one({'a': 0.2, 'c': 1.0}, 'y')\n"
                          "print(m.predict_one({'a': 1.0}))"),
}
RIVER = ("from river import linear_model\nm = linear_model.LogisticRegression()\n"
         "m.learn_one({'a': 1.0, 'b': 0.5}, True)\nm.learn_one({'a': 0.2, 'c': 1.0}, False)\n"
         "print(m.predict_one({'a': 1.0}))")
#: the issue's target: at most this many CPU seconds per estimator
TARGET_CPU_S = 10.0


def compile_bytecode(code):
    """Compile the Python bytecode of the checkout ``code`` (its packages), as pip does at install."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    dirs = [os.path.join(code, d) for d in ("streamssvm", "connectors") if os.path.isdir(os.path.join(code, d))]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], env=env, capture_output=True, check=False)


def child_seconds(code, src, cache=None):
    """(CPU s, wall s) of one child running ``src`` with streamssvm from ``code``; ``cache``: the
    kernel cache folder (None: a new empty one, removed after)."""
    tmp = cache or tempfile.mkdtemp(prefix="cold_")
    env = dict(os.environ, STREAMSSVM_CACHE=os.path.join(tmp, "kernels"), NUMBA_CACHE_DIR=os.path.join(tmp, "numba"),
               PYTHONPATH=code, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", src], env=env, cwd=tmp, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cache is None:
        shutil.rmtree(tmp, ignore_errors=True)
    if p.returncode:
        raise RuntimeError(f"child failed:\n{p.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def measure(code, reps, log=print):
    """Per estimator: cold (empty cache) and warm (cached) CPU / wall seconds of each repetition,
    and river's first prediction, alternated so that every row sees the same minutes."""
    out = {name: {"cold": [], "warm": []} for name in CHILDREN}
    out["river LogisticRegression"] = {"cold": [], "warm": []}
    for r in range(reps):
        for name, src in CHILDREN.items():
            cache = tempfile.mkdtemp(prefix="cold_")
            try:
                out[name]["cold"].append(child_seconds(code, src, cache))
                out[name]["warm"].append(child_seconds(code, src, cache))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            log(f"rep {r} {name}: cold {out[name]['cold'][-1][0]:.2f} CPU s, warm {out[name]['warm'][-1][0]:.2f} "
                f"(load {os.getloadavg()[0]:.2f})")
        out["river LogisticRegression"]["cold"].append(child_seconds(code, RIVER))
    return out


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def summary(res):
    """{name: (cold CPU, cold wall, warm CPU)} medians."""
    return {name: (median([c for c, _ in v["cold"]]), median([w for _, w in v["cold"]]),
                   median([c for c, _ in v["warm"]]) if v["warm"] else None) for name, v in res.items()}


def to_markdown(meta, res, before=None):
    s = summary(res)
    sb = summary(before) if before else None
    L = ["# Cold start: empty kernel cache to the first prediction", "",
         f"`python bench/cold_start.py --reps {meta['reps']}` — {meta['started']} UTC, streamssvm from `{meta['code']}` "
         f"(commit `{meta['commit']}`), {meta['cpu']}, load average {meta['load']} at the start. One fresh process "
         "per cell: import, the estimator's defaults, two `learn_one`, one `predict_one`; CPU = user + system of "
         f"the process; medians of {meta['reps']}. Warm: a second process on the same (now filled) cache. "
         f"Target: at most {TARGET_CPU_S:.0f} CPU s cold per estimator."
         + (f" Before: streamssvm from `{meta['before']['code']}` (commit `{meta['before']['commit']}`), measured in "
            "the same run, repetitions alternated." if before else ""), "",
         "| estimator | cold CPU s | cold wall s | warm CPU s | target met |" + (" before: cold CPU s |" if sb else ""),
         "|---|---|---|---|---|" + ("---|" if sb else "")]
    for name, (c, w, warm) in s.items():
        met = "" if name.startswith("river") else ("yes" if c <= TARGET_CPU_S else "**no**")
        L.append(f"| {name} | {c:.2f} | {w:.2f} | {'' if warm is None else f'{warm:.2f}'} | {met} |"
                 + (f" {sb[name][0]:.2f} |" if sb and name in sb else ""))
    return "\n".join(L) + "\n"


def git_commit(code):
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--code", default=ROOT, help="the checkout whose streamssvm is measured (default: this one)")
    ap.add_argument("--before", default=None, help="a second checkout measured in the same run (before/after)")
    ap.add_argument("--before-commit", default=None, help="the commit --before holds (when it is not a git checkout)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cold_start"), help="results stem (.json, .md)")
    a = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    from _common import cpu_model
    code = os.path.abspath(a.code)
    meta = {"started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "code": code, "commit": git_commit(code),
            "cpu": cpu_model(), "load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "reps": a.reps}
    res, before = {}, None
    for c in [code] + ([os.path.abspath(a.before)] if a.before else []):
        compile_bytecode(c)
    if a.before:
        before = {}
        for r in range(a.reps):   # alternated: one repetition each, in turn
            for k, v in measure(os.path.abspath(a.before), 1).items():
                before.setdefault(k, {"cold": [], "warm": []})
                before[k]["cold"] += v["cold"]
                before[k]["warm"] += v["warm"]
            for k, v in measure(code, 1).items():
                res.setdefault(k, {"cold": [], "warm": []})
                res[k]["cold"] += v["cold"]
                res[k]["warm"] += v["warm"]
        meta["before"] = {"code": os.path.abspath(a.before), "commit": a.before_commit or git_commit(a.before)}
    else:
        res = measure(code, a.reps)
    md = to_markdown(meta, res, before)
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "results": res, "before": before, "target_cpu_s": TARGET_CPU_S}, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
