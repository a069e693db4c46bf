"""Time from starting ``streamssvm demo`` (and ``run``) with a cold kernel cache (an empty
``NUMBA_CACHE_DIR``) to the first line it prints, and to the end of the numba import, for a
checkout given on the command line (compare checkouts in the same run). Wall time; the child
is killed once numba is imported (the compile itself is not measured).

    nice -n 10 python bench/notice_latency.py /work/main /work/wt/rel
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def measure(root, cmd, reps=2):
    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "s.jsonl")
            with open(src, "w") as f:
                f.write('{"x": {"a": 1}, "y": "x"}\n{"x": {"b": 1}, "y": "y"}\n')
            args = {"demo": ["demo", "--quick", "--out", tmp],
                    "run": ["run", "--source", src, "--task", "multiclass"]}[cmd]
            env = dict(os.environ, PYTHONPATH=root, NUMBA_CACHE_DIR=cache)
            t0 = time.perf_counter()
            p = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "streamssvm", *args], cwd=tmp, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            first = numba = None
            for line in p.stderr:
                t = time.perf_counter() - t0
                if line.startswith("import time:"):
                    if line.split("|")[-1].strip() == "numba":
                        numba = t
                elif first is None:
                    first = (t, line.strip())
                if first is not None and numba is not None:
                    break
            p.kill()
            p.wait()
            out.append({"first_line_s": first and first[0], "first_line": first and first[1], "numba_imported_s": numba})
    return out


if __name__ == "__main__":
    res = {"load_average_before": os.getloadavg()}
    for root in sys.argv[1:]:
        for cmd in ("demo", "run"):
            res[f"{root} {cmd}"] = measure(root, cmd)
            print(root, cmd, json.dumps(res[f"{root} {cmd}"]), flush=True)
    res["load_average_after"] = os.getloadavg()
    print("load average", res["load_average_after"])
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/notice_latency.json", "w") as f:
        json.dump(res, f, indent=1)
    lines = ["# Time to the first line with a cold kernel cache", "",
             f"Wall seconds from process start (`python -X importtime -m streamssvm ...`, `nice -n 10`, empty "
             f"`NUMBA_CACHE_DIR`); load average {res['load_average_before'][0]:.1f} before, "
             f"{res['load_average_after'][0]:.1f} after (2 cores shared). importtime itself adds overhead.", "",
             "| checkout | command | first line at (s) | numba imported at (s) | first line |", "|---|---|---|---|---|"]
    for k, runs in res.items():
        if k.startswith("load_average"):
            continue
        root, cmd = k.rsplit(" ", 1)
        for r in runs:
            lines.append(f"| {root} | {cmd} | {r['first_line_s'] or float('nan'):.2f} | "
                         f"{r['numba_imported_s'] or float('nan'):.2f} | {r['first_line']} |")
    with open("bench/results/notice_latency.md", "w") as f:
        f.write("\n".join(lines) + "\n")
