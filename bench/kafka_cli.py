"""``streamssvm run kafka://`` as a user runs it: the CLI in a subprocess (defaults, no progress bar,
a fresh checkpoint folder, ``stop_at_end``) over the topic of ``bench/kafka_stream.py`` (OCR letters
as JSON pixel dicts), per message: the run's CPU and wall (the summary's ``cpu_seconds`` and ``seconds``:
``Engine.run``) and the whole process's (start-up included: imports, kernel loading, set-up). ``--code DIR``
(repeatable): checkouts run alternately in each repetition, paired (the headline's Kafka row runs
the engine in its own process, so it does not see what the command itself does around it).
Tried with it: ``gc.freeze()`` in ``cmd_run`` before the stream (r19-kafka3, dropped: one full
collection per 40k letters went from ~0.06 s to ~0.007 s, but three paired sets of 4-7 reps
gave -3.7%, -3.9%, +0.3% run CPU per message: noise).

    OPENBLAS_NUM_THREADS=1 python bench/kafka_cli.py --code /path/to/main --code . [--letters 40000] [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(1, HERE)


def cli_run(code, bootstrap, topic, work):
    ck = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(code), OPENBLAS_NUM_THREADS="1")
    c0, w0 = _children_cpu(), time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "streamssvm", "run", "--source",
                        f"kafka://{bootstrap}/{topic}?partitions=0&stop_at_end=1", "--task", "multiclass",
                        "--no-progress", "--checkpoint-dir", ck, "--json"],
                       env=env, check=True, capture_output=True, cwd=work)
    cpu, wall = _children_cpu() - c0, time.perf_counter() - w0
    s = json.loads(p.stdout)
    return (s["cpu_seconds"], s["seconds"], cpu, wall), s["examples_seen"]


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", action="append", required=True, help="a checkout (repeatable)")
    ap.add_argument("--letters", type=int, default=40000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    import kafka_stream as ks
    from streamssvm.connectors.kafka import create_topic, produce_lines
    work = tempfile.mkdtemp(prefix="kafka-cli-")
    proc, bootstrap = ks.start_broker()
    try:
        msgs = ks.letter_messages(args.letters)
        create_topic(bootstrap, "letters", 1)
        produce_lines(bootstrap, "letters", msgs)
        for code in args.code:   # kernel caches loaded once outside the clock
            cli_run(code, bootstrap, "letters", work)
        got = {c: [] for c in args.code}
        for _ in range(args.reps):
            for code in args.code:
                t, n = cli_run(code, bootstrap, "letters", work)
                assert n == len(msgs), n
                got[code].append(t)
                print(f"{code}: " + _line([1e6 * v / n for v in t]), flush=True)
    finally:
        proc.kill()
        proc.wait()
    n = len(msgs)
    for code, v in got.items():
        print(f"{code}: medians of {len(v)}, " + _line([1e6 * statistics.median(t[i] for t in v) / n for i in range(4)])
              + f" (load {os.getloadavg()[0]:.1f})")


def _line(us):
    return "run cpu {:.1f} wall {:.1f}, process cpu {:.1f} wall {:.1f} us/msg".format(*us)


if __name__ == "__main__":
    main()
