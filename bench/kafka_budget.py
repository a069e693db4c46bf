"""Where a message's time goes: ``run kafka://`` against raw kafka-python consume + decode,
stage by stage, in CPU microseconds per message (the minimum over repetitions: on a shared
machine the noise only adds), on the topic of ``bench/kafka_stream.py`` (OCR letters as JSON
pixel dicts, 26 classes).

    python bench/kafka_budget.py [--letters 40000] [--reps 5]

Stages:

* ``poll``: kafka-python consuming the topic (fetch, record parsing, CRC), no decoding -- both;
* ``raw decode``: ``json.loads`` + the examples' validation (``parse_example``) -- the peer;
* ``source decode``: ``KafkaSource._decode_poll`` of each poll (the source's codec, orjson when
  installed, and the same validation: the ``x`` of a poll's records as one ``FeatureDicts``);
* ``source records``: ``KafkaSource``'s own per-message Python over polls already fetched
  (positions, origins, keys, ``Record``, micro-batches), its decoding stubbed out;
* ``engine``: ``Engine.run`` on the same records from memory, in the same micro-batches (a
  ``DictRecords`` per poll, as the source hands them out: the model encodes from the poll's
  ``FeatureDicts``) (prediction, learning, metrics, restore points, the final certificate; the
  engine's defaults, MulticlassSSVM replay=0);
* ``library``: the model's own ``predict_learn_each`` on the same rows, 1000 at a time (what
  the engine's learning costs without the engine).

raw = poll + raw decode; ours = poll + source decode + source records + engine. The ratio of
the two is what ``run kafka://`` can reach reading in place.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(1, HERE)


def _cpu_us(f, n, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        f()
        best = min(best, time.process_time() - t)
    return 1e6 * best / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--letters", type=int, default=40000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    import kafka_stream as ks
    import streamssvm as ss
    from kafka import KafkaConsumer, TopicPartition
    from streamssvm.connectors.base import READ_BREAK, DeadLetterSink, MemorySink, Record, Source
    from streamssvm.connectors.files import parse_example
    from streamssvm.connectors.kafka import KafkaSource, create_topic, produce_lines
    from streamssvm.engine import Engine
    msgs = ks.letter_messages(args.letters)
    n, reps = len(msgs), args.reps
    proc, bootstrap = ks.start_broker()
    try:
        create_topic(bootstrap, "letters", 1)
        produce_lines(bootstrap, "letters", msgs)
        polled = []

        def poll():
            c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                              max_partition_fetch_bytes=8 << 20, fetch_max_wait_ms=100)
            tp = TopicPartition("letters", 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            got, out = 0, []
            while got < n:
                for _, ms in c.poll(timeout_ms=500, max_records=1000).items():
                    got += len(ms)
                    out.append(ms)
            c.close()
            polled[:] = out
        poll()
        t = {"poll": _cpu_us(poll, n, reps)}
    finally:
        proc.kill()
        proc.wait()
    values = [m.value for ms in polled for m in ms]
    t["raw decode"] = _cpu_us(lambda: [parse_example(ks._std_json(v)) for v in values], n, reps)
    src = KafkaSource("127.0.0.1:1", "letters", partitions=[0])
    poll_values = [[m.value for m in ms] for ms in polled]
    t["source decode"] = _cpu_us(lambda: [src._decode_poll(vs) for vs in poll_values], n, reps)
    decoded_polls = [src._decode_poll(vs) for vs in poll_values]

    tp = TopicPartition("letters", 0)
    M = namedtuple("M", "offset key value")
    polls = [{tp: [M(m.offset, m.key, m.value) for m in ms]} for ms in polled]

    class Polled:   # the consumer's side done: the polls above, then the end
        def __init__(self):
            self.k = 0

        def poll(self, timeout_ms, max_records):
            self.k += 1
            return polls[self.k - 1] if self.k <= len(polls) else {}

        def assignment(self):
            return {tp}

        def highwater(self, tp):
            return n

        def end_offsets(self, tps, timeout_ms):
            return {tp: n for tp in tps}

    def records():
        s = KafkaSource("127.0.0.1:1", "letters", partitions=[0], stop_at_end=True,
                        dead_letter=DeadLetterSink(MemorySink()))
        s._consumer = Polled()
        done = iter(decoded_polls)
        s._decode_poll = lambda vs: next(done)
        for _ in s.micro_batches(lambda: 1024):
            pass
    t["source records"] = _cpu_us(records, n, reps)

    decoded = [d[:2] for got, _ in decoded_polls for d in got]
    recs = [Record(x=x, y=y, key=f"letters/0@{i}", position={"topic": "letters", "offsets": {"0": i + 1}},
                   origin=f"letters/0@{i}") for i, (x, y) in enumerate(decoded)]
    polls_in_memory, at = [], 0
    for got, fd in decoded_polls:
        polls_in_memory.append((recs[at:at + len(got)], fd))
        at += len(got)

    class Memory(Source):
        """The polls decoded, in the source's micro-batches (a READ_BREAK after each poll)."""

        def __init__(self, polls):
            super().__init__()
            self.polls, self._fd, self.name = polls, None, "memory"

        def position(self):
            return None

        def stream(self):
            for rs, fd in self.polls:
                self._fd = fd
                yield from rs
                yield READ_BREAK

        def __iter__(self):
            return (r for r in self.stream() if r is not READ_BREAK)

        _micro_batch = KafkaSource._micro_batch

        @property
        def _poll_features(self):
            return self._fd

    make = lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0))  # noqa: E731
    Engine(make(), Memory(polls_in_memory[:2]), task="multiclass", progress=False).run()   # compiled
    t["engine"] = _cpu_us(lambda: Engine(make(), Memory(polls_in_memory), task="multiclass", progress=False).run(),
                          n, reps)
    xs, ys = [d[0] for d in decoded], [d[1] for d in decoded]

    def library():
        m = make()
        for i in range(0, n, 1000):
            m.predict_learn_each(xs[i:i + 1000], ys[i:i + 1000])
    t["library"] = _cpu_us(library, n, reps)
    raw = t["poll"] + t["raw decode"]
    ours = t["poll"] + t["source decode"] + t["source records"] + t["engine"]
    print(f"{n} messages, CPU us per message (minimum of {reps}), load average {os.getloadavg()[0]:.1f}")
    print("| stage | us/msg |\n|---|---|")
    for k, v in t.items():
        print(f"| {k} | {v:.1f} |")
    print(f"| raw = poll + raw decode | {raw:.1f} |")
    print(f"| ours = poll + source decode + source records + engine | {ours:.1f} |")
    print(f"ours / raw speed: {raw / ours:.2f}; at 0.8 ours may take {1.25 * raw:.1f} us/msg, "
          f"leaving {1.25 * raw - t['poll'] - t['source decode'] - t['source records']:.1f} for the engine "
          f"(it takes {t['engine']:.1f}; the library alone {t['library']:.1f})")
    print(json.dumps(t))


if __name__ == "__main__":
    main()
