"""``streamssvm path``: the eps-approximate regularization path of a source's examples (Osokin et
al., Minding the gaps for block Frank-Wolfe optimization of structured SVMs, ICML 2016, Sec. 4),
scored on ``--test``, with a plot of the gap, the primal objective and the validation score
against lambda, and the model of the best lambda saved on request."""
from __future__ import annotations

import json
import sys

from .options import learner_params, make_model, read_test, strict_json

#: the path's options, generated from :class:`streamssvm.regpath.PathSettings`
PATH_OPTIONS = ("eps", "kappa", "lam_min", "exact", "max_passes", "check_every", "max_seconds")


def add_path_args(p):
    """The path's options (its ``Param`` rows), BCFW's options (its rows: the path needs BCFW) and
    the estimator's ``--loss`` / ``--n-features``."""
    from ..learners.bcfw import BCFW
    from ..regpath import PathSettings
    from .options import param_option
    g = p.add_argument_group("path")
    for name in PATH_OPTIONS:
        param_option(g, PathSettings, name)
    lg = p.add_argument_group("learner (BCFW)")
    for row in BCFW.params:
        if row.cli:
            param_option(lg, BCFW, row.name)
    lg.add_argument("--loss", default=None, choices=["normalized", "hamming"],
                    help="sequence: Hamming loss per token or normalized per sentence (the OCR papers' loss)")
    lg.add_argument("--n-features", type=int, default=None,
                    help="hashing trick with this many buckets (default None: a growing vocabulary)")
    p.set_defaults(learner="bcfw")


def _examples(uri, task, model):
    """The (x, y) records of ``uri`` in the form ``model`` learns (bad records: ValueError)."""
    out = []
    for i, (x, y) in enumerate(read_test(uri, task) or ()):
        try:
            out.append(model.coerce_input(x, y))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{uri}: record {i}: {e}") from None
    return out


def plot_path(path, file, title="regularization path"):
    """Gap (certified, with eps), primal objective and validation score against lambda (log
    scale), one panel each; the breakpoints marked."""
    from .._optional import require
    matplotlib = require("matplotlib", extra="plot", feature="plots (path --plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    rows = 3 if path.scores is not None else 2
    fig, ax = plt.subplots(rows, 1, figsize=(6.5, 2.6 * rows), sharex=True, squeeze=False)
    lam = path.breakpoints
    a = ax[0][0]
    a.loglog(lam, np.maximum(path.gaps, 1e-12), "o-", ms=3, label="gap at the breakpoint (kappa eps)")
    if path.true_gaps is not None:
        a.loglog(lam, np.maximum(path.true_gaps, 1e-12), "x", ms=4, label="exact gap")
    a.axhline(path.eps, color="C3", ls="--", lw=1, label="eps (bound on every piece)")
    a.set_ylabel("duality gap")
    a.legend(fontsize=8)
    b = ax[1][0]
    b.semilogx(lam, path.primals, "o-", ms=3, color="C1")
    b.set_ylabel("primal objective")
    if path.scores is not None:
        key = "micro_f1" if "micro_f1" in path.scores[0] else "accuracy"
        c = ax[2][0]
        c.semilogx(lam, [s[key] for s in path.scores], "o-", ms=3, color="C2")
        best, _ = path.best(key)
        c.axvline(best, color="0.5", ls=":", lw=1)
        c.set_ylabel(f"validation {key.replace('_', ' ')}")
    for r in ax:
        r[0].grid(True, which="both", alpha=0.3)
    ax[-1][0].set_xlabel("lambda")
    ax[-1][0].invert_xaxis()
    fig.suptitle(f"{title}\n{len(lam)} breakpoints, {path.passes[-1]:.0f} effective passes, {path.status}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(file, dpi=100)
    plt.close(fig)


def cmd_path(args):
    model = make_model(args)
    train = _examples(args.source, args.task, model)
    if not train:
        print(f"error: {args.source} holds no records", file=sys.stderr)
        return 1
    test = _examples(args.test, args.task, model) if args.test else None
    for x, y in train:
        model.learn_one(x, y)
    settings = {k: getattr(args, k) for k in PATH_OPTIONS}
    path = model.regularization_path(data=None if test is None else ([x for x, _ in test], [y for _, y in test]),
                                     **settings)
    summary = {"examples": model.n_blocks, "learner": learner_params(args), **path.to_dict()}
    if test is not None:
        key = "micro_f1" if args.task == "multilabel" else "accuracy"
        lam, sc = path.best(key)
        summary["best"] = {"lam": lam, **sc}
    if args.plot:
        plot_path(path, args.plot, title=f"streamssvm path ({args.task}, n={model.n_blocks})")
        summary["plot"] = args.plot
    if args.save:
        lam = summary["best"]["lam"] if test is not None else float(path.breakpoints[-1])
        path.model_at(lam).save(args.save)
        summary["saved"] = {"file": args.save, "lam": lam}
    if args.json:
        print(json.dumps(strict_json(summary), indent=2, allow_nan=False))
        return 0
    print(f"{model.n_blocks:,} examples; {len(path)} breakpoints from lambda {path.breakpoints[0]:.4g} to "
          f"{path.breakpoints[-1]:.4g} ({path.status}: covered down to {path.lam_min_covered:.4g}); "
          f"{path.passes[-1]:.1f} effective passes, {path.seconds[-1]:.1f} s wall, {path.cpu_seconds[-1]:.1f} s CPU")
    step = max(1, len(path) // 12)
    head = "lambda        gap        primal" + ("      score" if test is not None else "")
    print(head)
    for j in list(range(0, len(path), step)) + ([len(path) - 1] if (len(path) - 1) % step else []):
        line = f"{path.breakpoints[j]:<12.5g}  {path.gaps[j]:<9.4g}  {path.primals[j]:<10.5g}"
        if test is not None:
            line += f"  {path.scores[j]['accuracy' if args.task != 'multilabel' else 'micro_f1']:.4f}"
        print(line)
    if test is not None:
        print(f"best lambda {summary['best']['lam']:.5g}: {json.dumps(strict_json(summary['best']))}")
    if args.plot:
        print(f"plot {args.plot}")
    if args.save:
        print(f"saved the model at lambda {summary['saved']['lam']:.5g} to {args.save}")
    return 0
