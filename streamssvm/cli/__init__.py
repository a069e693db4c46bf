"""Command line: ``streamssvm demo | run | predict | inspect | report | path | broker | produce | export |
datasets``.

    streamssvm demo                          # OCR-large replayed as a stream, gap snapshots, plot
    streamssvm run --source file://words.conll --task sequence --learner bcfw --lam 1e-3 \\
        --checkpoint-dir ckpt/ --snapshot-every 5000 --metrics metrics.jsonl
    streamssvm report ckpt/ --plot gap.png   # or --json
    streamssvm predict --model m.ssvm --source file://test.jsonl --sink predictions.jsonl  # --nbest 5
    streamssvm inspect m.ssvm                # top features per label, transitions, certificate (--json)
    streamssvm path --source file://train.jsonl --task sequence --test file://test.jsonl --plot path.png
    streamssvm broker --port 9092            # local Kafka-protocol broker (extra: kafka-dev)
    streamssvm produce examples.jsonl --bootstrap 127.0.0.1:9092 --topic letters
    streamssvm run --source kafka://127.0.0.1:9092/letters?group=g1 --task multiclass \\
        --sink kafka://127.0.0.1:9092/predictions --dead-letter kafka://127.0.0.1:9092/dead --checkpoint-dir ckpt/

The package holds one module per command (:mod:`.run`, :mod:`.predict`, :mod:`.inspect`, :mod:`.report`,
:mod:`.path`, :mod:`.demo`, :mod:`.export`, :mod:`.datasets`, :mod:`.broker` with ``produce``), the options they
share (:mod:`.options`), the kernel warm-up (:mod:`.warmup`), the plotting (:mod:`.plotting`) and
the parser with :func:`main` (:mod:`.parser`). Importing it stays light: numpy, numba and the
kernels load inside the commands.
"""
from __future__ import annotations

from .broker import free_port, start_broker
from .options import graceful_signals, make_model
from .parser import build_parser, main
from .plotting import plot_history
from .warmup import (_early_notice, _kernel_cache_cold, _kernel_cache_dirs,  # noqa: F401 (tests)
                     _say_compiling_early, warm_kernels)

_make_model = make_model   # the name it had in the one-module CLI

__all__ = ["build_parser", "free_port", "graceful_signals", "main", "make_model", "plot_history", "start_broker",
           "warm_kernels"]
