"""The long suite (``python -m bench --suite long``): the full benchmark runs behind the rows that
do not fit in the headline suite's ~25 minutes, one script each, in order. Each writes its own
``bench/results/<name>.{json,md}`` with its peers measured in the same run. There is no quick
mode (a script's own ``--quick`` overwrites its results file with a smoke run: use it by hand).

Each entry: (results it writes, the command after ``python``, what it reproduces, rough wall
minutes on this 2-core machine when idle).
"""

LONG = [
    ("ocr_bcfw", ["bench/ocr_bcfw.py"],
     "OCR-large gap curves: 2 lambdas x 8 BCFW variants x 3 seeds (Osokin et al. protocol)", 15),
    ("quality_large_tagset_full_final", ["bench/quality_large_tagset.py", "--train", "100000", "--test", "500",
                                         "--passes", "3", "--methods", "bcfw-sparse", "crfsuite-ap", "--chunk", "5000",
                                         "--timeout", "4800", "--name", "quality_large_tagset_full_final"],
     "Brown POS, 472 fine tags, all 45,829 training sentences: BCFW defaults vs crfsuite AP", 45),
    ("multiclass_stream", ["bench/multiclass_stream.py"],
     "river / scikit-learn on ImageSegments and OCR letters; learn_many 16-d / 128-d", 8),
    ("quality_multiclass", ["bench/quality_multiclass.py"],
     "learn_one array vs dict; 784-d batches vs scikit-learn, 3 alternated subprocesses", 4),
    ("kafka_stream", ["bench/kafka_stream.py"],
     "Kafka: letters and words topics, 3 repetitions, produce -> prediction latency", 3),
    ("quality_memoir_tagpair", ["bench/quality_memoir.py"],
     "MEMOIR on Brown tag pairs: 7 peers (averaging variants, HNSW, BCFW, perceptron)", 20),
    ("brown_extreme", ["bench/brown_extreme.py", "--declared", "b:50000", "--declared-batch", "100",
                       "--declared-peers", "exact,hnsw", "--declared-cap", "400"],
     "MEMOIR on Brown word-from-context: exact / HNSW / LSH, Vowpal Wabbit --oaa, scikit-learn", 15),
    ("memoir_quick_dense_50000", ["bench/memoir_quick.py", "--classes", "50000", "--n", "4000", "--kind", "dense"],
     "MEMOIR, 50k classes, dense 256-d (synthetic): HNSW / LSH vs exact search", 5),
    ("yeast_slack", ["bench/yeast_slack.py"],
     "yeast pairwise MRF: searches inside cutting plane (Choi et al.)", 8),
    ("slack_convergence", ["bench/slack_convergence.py"],
     "SGD with slack rescaling: angular vs bisecting, time to a common objective", 7),
    ("mrf_lp", ["bench/mrf_lp.py"], "pairwise MRF, 24 labels: LP relaxation oracle (HiGHS) vs enumeration", 4),
    ("hierarchy_slack", ["bench/hierarchy_slack.py"], "hierarchical multiclass with slack rescaling", 2),
    ("graphseg", ["bench/graphseg.py"], "GraphSegmenter (positivity-constrained BCFW, min cut) on noisy horse "
     "silhouettes vs per-pixel classifiers and a LinearSVC + PyMaxflow cut", 1),
    ("quality_sequence", ["bench/quality_sequence.py"],
     "SequenceTagger losses and SGD vs BCFW on OCR-large and Brown, vs python-crfsuite", 10),
    ("bmrm_pragam", ["bench/bmrm_pragam.py"], "BMRM and Pragam against liblinear and Pegasos", 8),
    ("regpath", ["bench/regpath.py", "--quick"],
     "eps-approximate regularization path vs heuristic path vs grid search (Osokin et al. Fig. 8); "
     "--quick is the committed result (30 s per method)", 4),
    ("gdmm_large_domain_K3000", ["bench/gdmm_large_domain.py"], "GDMM vs BCFW with 1k-10k labels (synthetic)", 15),
    ("gdmm_multilabel_yeast_gdmm", ["bench/gdmm_multilabel.py", "yeast"], "GDMM multi-label on yeast", 15),
    ("distributed", ["bench/distributed.py"], "Ray scale-out: 1, 2 and 4 workers", 5),
]

def run(log, only=None):
    """Run the entries (``only``: their result names) one after the other from the repository
    root, each in its own process; returns [(name, return code, wall seconds)]."""
    import os
    import subprocess
    import sys
    import time
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = []
    for name, cmd, what, minutes in LONG:
        if only and name not in only:
            continue
        args = [sys.executable, *cmd]
        log(f"{name}: {' '.join(args[1:])}  (~{minutes} min: {what})")
        t0 = time.perf_counter()
        rc = subprocess.call(args, cwd=root)
        done.append((name, rc, time.perf_counter() - t0))
        log(f"{name}: exit {rc} after {done[-1][2]:.0f} s")
    return done
