"""``streamssvm demo``: OCR-large replayed as a stream, with gap snapshots and a plot."""
from __future__ import annotations

import json
import os
import time

from .options import strict_json
from .plotting import plot_history
from .warmup import warm_kernels


def cmd_demo(args):
    """OCR-large words replayed as a stream into a SequenceTagger (BCFW, gap sampling):
    exact duality-gap snapshots while learning, then gap-sampled refinement, test error and a
    plot."""
    import streamssvm as ss
    from streamssvm.connectors.base import IterableSource

    from ..engine import Engine
    os.makedirs(args.out, exist_ok=True)
    X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")

    def warm():  # compile before the clock starts: the rates below are learning only
        t = ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling="gap", seed=0),
                              labels=letters, loss="normalized")
        for x, y in zip(X_tr[:2], y_tr[:2]):
            t.predict_one(x)
            t.learn_one(x, [letters[c] for c in y])
        t.certificate()
        t.refine(0.5)
        t.predict_many(X_te[:2])
    if args.quick:
        X_tr, y_tr = X_tr[:1000], y_tr[:1000]
    letters = [chr(ord("a") + i) for i in range(26)]
    stream = ((x, [letters[c] for c in y]) for x, y in zip(X_tr, y_tr))
    # the papers' OCR-large protocol (Lacoste-Julien, Jaggi, Schmidt & Pletscher, Block-coordinate
    # Frank-Wolfe optimization for structural SVMs): the Hamming loss normalized per word, so
    # P(0) = 1 and the printed gaps are on the scale of their plots
    tagger = ss.SequenceTagger(learner=ss.learners.BCFW(lam=args.lam, replay=args.replay, sampling="gap",
                                                        seed=0), labels=letters, loss="normalized")
    print(f"streamssvm demo: OCR-large, {len(X_tr)} training words as a stream, lambda={args.lam}, "
          f"replay={args.replay}, gap sampling, Hamming loss normalized per word (the papers')", flush=True)
    warm_kernels(warm)
    t0 = time.perf_counter()
    ckpt = os.path.join(args.out, "ckpt")
    if os.path.isdir(ckpt) and not args.resume:
        import shutil
        shutil.rmtree(ckpt)
    eng = Engine(tagger, IterableSource(stream, name="ocr-large"), task="sequence",
                 snapshot_every=args.snapshot_every, checkpoint_dir=ckpt,
                 checkpoint_every=10**9, progress=not args.no_progress)
    summary = eng.run()
    tagger = eng.model
    print(f"stream done: {summary['examples_seen']:,} words in {summary['seconds']:.1f}s "
          f"({summary['throughput']:,.0f} words/s), "
          f"progressive letter accuracy {summary['metrics']['token_accuracy']:.4f}, "
          f"gap {summary['last_certificate']['gap']:.4g}", flush=True)
    hist = list(eng.history)
    rows = []
    seen = eng.examples_seen
    passes_done = 0.0
    for p in args.refine_schedule:
        c = tagger.refine(p - passes_done, certify=True)
        passes_done = p
        pred = tagger.predict_many(X_te)
        import numpy as np
        err = float(np.mean(np.concatenate([np.asarray(a) != np.asarray([letters[c_] for c_ in y])
                                            for a, y in zip(pred, y_te)])))
        rows.append((p, c.gap, c.primal, c.dual, err, time.perf_counter() - t0))
        hist.append({"examples_seen": seen + int(p * c.n_blocks), "passes": p, "gap": c.gap,
                     "primal": c.primal, "dual": c.dual, "token_accuracy": 1 - err, "phase": "refine",
                     "test": {"token_accuracy": 1 - err}})
    if rows:   # the checkpoint holds the refined model, so `streamssvm report` shows it
        eng.history[:] = strict_json(hist)
        eng.last_certificate = strict_json(c.to_dict())
        eng.checkpoint(source_position=True)
        print(f"  +{p:>4g} passes  gap {c.gap:.4g}  primal {c.primal:.5f}  dual {c.dual:.5f}  "
              f"test error {err:.4f}  ({time.perf_counter() - t0:.1f}s)", flush=True)
    plot = os.path.join(args.out, "gap.png")
    plot_history(hist, plot, title=f"OCR-large: stream, then refinement (lambda={args.lam})",
                 xlabel="words seen")
    if args.save_model:
        tagger.save(args.save_model)
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump(strict_json({"stream": summary, "refine": [dict(zip(("passes", "gap", "primal", "dual", "test_error",
                                                                  "seconds"), r)) for r in rows]}),
                  f, indent=2, default=str, allow_nan=False)
    print(f"plot: {plot}   report: streamssvm report {ckpt}" +
          (f"   model: {args.save_model}" if args.save_model else "   (--save-model FILE keeps the model)"))
    return 0
