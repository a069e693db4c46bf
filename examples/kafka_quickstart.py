"""Kafka quickstart: a local broker, a topic of OCR letters, a worker that learns from it with
checkpoints, predictions to a topic — all on 127.0.0.1.

    pip install 'streamssvm[kafka-dev]'
    python examples/kafka_quickstart.py

The same with the command line:

    streamssvm broker --port 9092 &
    streamssvm produce letters.jsonl --bootstrap 127.0.0.1:9092 --topic letters
    streamssvm run --source 'kafka://127.0.0.1:9092/letters?group=g1' --task multiclass \\
        --sink kafka://127.0.0.1:9092/predictions --dead-letter kafka://127.0.0.1:9092/dead \\
        --checkpoint-dir ckpt/ --snapshot-every 1000 --idle-timeout 10
"""
import json
import tempfile

import numpy as np

import streamssvm as ss
from streamssvm.connectors.base import DeadLetterSink
from streamssvm.connectors.kafka import KafkaSink, KafkaSource, create_topic, produce_lines
from streamssvm.cli import start_broker
from streamssvm.engine import Engine


def main():
    proc, bootstrap = start_broker()
    print(f"broker on {bootstrap}")
    try:
        lines = []
        for i, (x, y) in enumerate(ss.datasets.ocr_letter_stream("large")):
            if i == 3000:
                break
            lines.append(json.dumps({"x": {str(j): 1.0 for j in np.flatnonzero(x)}, "y": y}).encode())
        lines.insert(100, b"{this is not json")  # goes to the dead-letter topic
        create_topic(bootstrap, "letters", partitions=1)
        produce_lines(bootstrap, "letters", lines)
        dead = DeadLetterSink(KafkaSink(bootstrap, "dead"))
        source = KafkaSource(bootstrap, "letters", group="quickstart", dead_letter=dead)
        engine = Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0)), source,
                        task="multiclass", sink=KafkaSink(bootstrap, "predictions"), dead_letter=dead,
                        checkpoint_dir=tempfile.mkdtemp(), snapshot_every=1000, idle_timeout=5)
        summary = engine.run()
        source.close()
        print(f"learned {summary['examples_seen']} messages, progressive accuracy "
              f"{summary['metrics']['accuracy']:.3f}, gap {summary['last_certificate']['gap']:.4g}, "
              f"{dead.count} dead letter(s); stopped: {summary['stopped']}")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
