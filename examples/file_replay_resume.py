"""Replay a file as a stream with checkpoints; stop half-way and resume exactly where it was.

    python examples/file_replay_resume.py
"""
import os
import tempfile

import numpy as np

import streamssvm as ss
from streamssvm.connectors.files import open_source, write_jsonl
from streamssvm.engine import Engine


def main():
    d = tempfile.mkdtemp()
    path = os.path.join(d, "letters.jsonl")
    recs = [{"x": x, "y": y} for i, (x, y) in zip(range(4000), ss.datasets.ocr_letter_stream("large"))]
    write_jsonl(path, recs)
    ckpt = os.path.join(d, "ckpt")

    def engine(max_examples=None):
        return Engine(ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=1, seed=0)),
                      open_source(path), task="multiclass", snapshot_every=500, checkpoint_dir=ckpt,
                      checkpoint_every=500, max_examples=max_examples, progress=False)

    first = engine(max_examples=2000).run()
    print(f"first run: {first['examples_seen']} examples, stopped: {first['stopped']}, "
          f"position {first['position']}")
    second = engine().run()
    print(f"second run resumed from {os.path.basename(second['resumed_from'])}: "
          f"{second['new_examples']} new examples, {second['examples_seen']} in all, "
          f"accuracy {second['metrics']['accuracy']:.3f}, gap {second['last_certificate']['gap']:.4g}")
    assert second["examples_seen"] == 4000 and np.isfinite(second["last_certificate"]["gap"])


if __name__ == "__main__":
    main()
