"""One validation, one encoding of a Kafka poll's dict records, A/B in one process (alternated
repetitions, no broker): the topic of ``bench/kafka_stream.py`` (OCR letters as JSON pixel dicts, 26
classes) in polls of 1000 messages, decoded and learned by the engine (its defaults,
MulticlassSSVM replay=0) as ``run kafka://`` does after the poll:

* ``A`` (record by record): ``KafkaSource._decode_record`` per message (each ``x`` validated and
  copied), micro-batches as plain lists (the model gathers, checks and encodes the dicts again:
  ``FeatureIndex.dict_csr`` of a list);
* ``B`` (this branch): ``KafkaSource._decode_poll`` per poll (the ``x`` of its records validated
  as one ``FeatureDicts``), micro-batches as ``DictRecords`` (the model encodes from the
  ``FeatureDicts``' arrays).

CPU microseconds per message, medians over repetitions (A and B alternate), and whether both
learned the same model (its state's bytes).

    OPENBLAS_NUM_THREADS=1 python bench/kafka_decode_ab.py [--letters 20000] [--reps 5]

Measured (r21, shared 2-core machine, decode + engine CPU us per message, A -> B): 20k letters, 5
reps, load 1.1: 61.7 -> 57.1 (-7.5%); 40k, 3 reps, load 2.5: 40.0 -> 33.6 (-15.8%); 40k, 3 reps,
load 3.6: 60.9 -> 48.1 (-21%); after dict_csr of a list went through FeatureDicts.of too (A a little
faster), 40k, 3 reps, load 1.7: 37.6 -> 34.2 (-8.8%; decode 10.3 -> 8.4, engine 27.3 -> 25.8); the
same model bits each time. (Under load the saving grows: less memory traffic per record.)
"""
from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(1, HERE)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--letters", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--poll", type=int, default=1000)
    args = ap.parse_args(argv)
    import kafka_stream as ks
    import streamssvm as ss
    from streamssvm.connectors.base import READ_BREAK, Record, Source
    from streamssvm.connectors.kafka import KafkaSource
    from streamssvm.engine import Engine
    msgs = ks.letter_messages(args.letters)
    n = len(msgs)
    polls = [msgs[i:i + args.poll] for i in range(0, n, args.poll)]
    src = KafkaSource("127.0.0.1:1", "letters", partitions=[0])

    class Polls(Source):
        """The polls decoded one at a time when the stream reaches them (as the Kafka source
        does, the decoding's time kept apart), in the source's micro-batches (a READ_BREAK
        after each poll)."""

        def __init__(self, polls, decode):
            super().__init__()
            self.polls, self.decode, self._poll_features, self.name = polls, decode, None, "polls"
            self.decoding, self.at = 0.0, 0

        def position(self):
            return self.at

        def stream(self):
            for p in self.polls:
                t = time.process_time()
                got, self._poll_features = self.decode(p)
                self.decoding += time.process_time() - t
                for x, y, _ in got:
                    self.at += 1
                    yield Record(x=x, y=y, key=self.at - 1, position=self.at, origin=f"letters/0@{self.at - 1}")
                yield READ_BREAK

        def __iter__(self):
            return (r for r in self.stream() if r is not READ_BREAK)

        _micro_batch = KafkaSource._micro_batch

    def decode_a(p):
        return [src._decode_record(v) for v in p], None

    decode_b = src._decode_poll
    make = lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0))  # noqa: E731

    def run(polls, decode):
        source = Polls(polls, decode)
        eng = Engine(make(), source, task="multiclass", progress=False)
        t = time.process_time()
        eng.run()
        total = time.process_time() - t
        return source.decoding, total - source.decoding, eng.model

    run(polls[:2], decode_b)   # kernels loaded
    times = {k: {"decode": [], "engine": []} for k in "AB"}
    states = {}
    for _ in range(args.reps):
        for k, dec in (("A", decode_a), ("B", decode_b)):
            d, e, model = run(polls, dec)
            times[k]["decode"].append(d)
            times[k]["engine"].append(e)
            states[k] = pickle.dumps(model.state())
    print(f"{n} messages in polls of {args.poll}, CPU us per message (medians of {args.reps}, A and B alternated), "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| variant | decode | engine | decode + engine |\n|---|---|---|---|")
    med = {}
    for k in "AB":
        d = statistics.median(times[k]["decode"]) * 1e6 / n
        e = statistics.median(times[k]["engine"]) * 1e6 / n
        s = statistics.median(a + b for a, b in zip(times[k]["decode"], times[k]["engine"])) * 1e6 / n
        med[k] = s
        print(f"| {k} | {d:.1f} | {e:.1f} | {s:.1f} |")
    print(f"B - A: {med['B'] - med['A']:+.1f} us/msg ({med['B'] / med['A'] - 1:+.1%}); "
          f"same model bits: {states['A'] == states['B']}")


if __name__ == "__main__":
    main()
