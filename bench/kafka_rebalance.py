"""How long a Kafka consumer group takes to move partitions between members (the alternative to
the distributed job's pinned partitions), on the Tansu broker of ``streamssvm broker``.

    flock /tmp/bench.lock nice -n 0 python3 bench/kafka_rebalance.py

Protocol: a topic of 4 partitions; consumer A subscribes to it in group G and polls until it is
assigned all 4 (join); consumer B subscribes in the same group: time until A and B hold 2 each
and both poll again (a rebalance on join); B then stops without leaving the group (its process
is gone: no LeaveGroup) -- time until A is assigned all 4 again (a rebalance on failure); last,
B' joins and leaves cleanly (close: LeaveGroup) -- time until A holds all 4. The session timeout
is the distributed workers' (6 s, heartbeats every 1 s). Prints one line per event. Nothing is
written to bench/results.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kafka import KafkaConsumer  # noqa: E402

from streamssvm.cli import start_broker  # noqa: E402
from streamssvm.connectors.kafka import create_topic, produce_lines  # noqa: E402


def consumer(bootstrap, group):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000,
                      max_poll_interval_ms=300000)
    c.subscribe(["rb"])
    return c


def wait(cons, want, timeout=60.0):
    """Poll every consumer until their assignment sizes are ``want``; seconds taken."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        for c in cons:
            c.poll(timeout_ms=50)
        if [len(c.assignment()) for c in cons] == want:
            return time.perf_counter() - t0
    raise TimeoutError(f"assignments {[len(c.assignment()) for c in cons]} != {want}")


def main():
    log = open(os.devnull, "wb")
    proc, bootstrap = start_broker(log=log)
    try:
        create_topic(bootstrap, "rb", partitions=4)
        produce_lines(bootstrap, "rb", [b'{"x": {"a": 1.0}, "y": 0}'] * 400, partitions=4)
        a = consumer(bootstrap, "G")
        print(f"A joins, gets 4 partitions: {wait([a], [4]):.2f} s", flush=True)
        # B in its own process, killed with SIGKILL (no LeaveGroup, no more heartbeats)
        code = ("import sys, time; sys.path.insert(0, %r); from kafka_rebalance import consumer\n"
                "c = consumer(%r, 'G')\nwhile True:\n    c.poll(timeout_ms=50)\n"
                "    print(len(c.assignment()), flush=True)\n" % (HERE, bootstrap))
        t0 = time.perf_counter()
        b = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        while True:
            a.poll(timeout_ms=50)
            line = b.stdout.readline()
            if line.strip() == "2" and len(a.assignment()) == 2:
                break
        print(f"B (a process) joins, A and B get 2 each: {time.perf_counter() - t0:.2f} s", flush=True)
        b.kill()
        b.wait()
        print(f"B killed (SIGKILL: no LeaveGroup), A gets 4 again: {wait([a], [4]):.2f} s", flush=True)
        b2 = consumer(bootstrap, "G")
        print(f"B' joins, A and B' get 2 each: {wait([a, b2], [2, 2]):.2f} s", flush=True)
        b2.close()
        print(f"B' leaves (LeaveGroup), A gets 4 again: {wait([a], [4]):.2f} s", flush=True)
        a.close()
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
