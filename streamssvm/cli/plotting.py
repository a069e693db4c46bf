"""The metrics plot of ``report --plot`` and ``demo`` (gap, primal/dual and accuracy against examples
seen; the ``plot`` extra)."""
from __future__ import annotations

import math

from .._optional import require


def _finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _accuracy_name(h):
    """The metric a history entry's accuracy panel shows: (key, label)."""
    if "micro_f1" in h:
        return "micro_f1", "micro-F1"
    if "token_accuracy" in h:
        return "token_accuracy", "token accuracy"
    return "accuracy", "accuracy"


def plot_history(history, path, title="streamssvm", xlabel="examples seen"):
    """A figure read at a glance: the stream (progressive validation) and the refinement (test
    accuracy) in separate columns, one metric per axis (duality gap on a log scale above, the
    accuracy below, with the held-out ``test`` metric of ``run --test`` as a second curve),
    thousands separators on the axes; the gap axis is logarithmic only where the gap spans a
    decade or more (a narrow range reads better on a linear axis); where no finite gap exists (e.g. MEMOIR,
    SGD past its window) the gap axis says "no dual certificate (primal only)" and shows the
    primal objective instead.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "g.png")
    >>> plot_history([{"examples_seen": 1000 * k, "gap": 1.0 / k, "accuracy": 0.5} for k in (1, 2)], p)
    >>> os.path.getsize(p) > 0
    True
    """
    matplotlib = require("matplotlib", extra="plot", feature="plots (demo, report --plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    phases = [ph for ph in ("stream", "refine") if any(h.get("phase", "stream") == ph for h in history)]
    fig, ax = plt.subplots(2, len(phases), figsize=(5.5 * len(phases), 7), squeeze=False)
    thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")
    for col, phase in enumerate(phases):
        hs = [h for h in history if h.get("phase", "stream") == phase]
        xs = [h["examples_seen"] for h in hs]
        if phase == "refine":
            xs = [h.get("passes", x) for h, x in zip(hs, xs)]
        gx = [(x, h["gap"]) for x, h in zip(xs, hs) if _finite(h.get("gap"))]
        a = ax[0][col]
        if gx:
            gs = [max(g, 1e-12) for _, g in gx]
            (a.semilogy if max(gs) >= 10 * min(gs) else a.plot)([x for x, _ in gx], gs, "o-", color=f"C{col}", ms=3)
            a.set_ylabel("duality gap (certified upper bound)")
        else:
            px = [(x, h["primal"]) for x, h in zip(xs, hs) if _finite(h.get("primal"))]
            if px:
                a.plot([x for x, _ in px], [p for _, p in px], "o-", color="C2", ms=3)
                a.set_ylabel("primal objective")
            a.text(0.5, 0.5, "no dual certificate (primal only)", transform=a.transAxes, ha="center",
                   va="center", fontsize=11, color="0.3")
        if phase == "stream" and len(gx) > 1 and any(b_ > a_ * 1.01 for (_, a_), (_, b_) in zip(gx, gx[1:])):
            a.text(0.02, 0.02, "the gap rises as new examples arrive (a new block starts at zero;\n"
                   "with lam=None, lambda follows n), and falls as the held ones are revisited",
                   transform=a.transAxes, fontsize=7, color="0.35", va="bottom")
        key, name = _accuracy_name(hs[0])
        b = ax[1][col]
        tx = [(x, h["test"].get(key)) for x, h in zip(xs, hs)
              if isinstance(h.get("test"), dict) and _finite(h["test"].get(key))]
        if phase == "stream":   # the progressive metric (the refinement learns nothing new: no such metric)
            b.plot(xs, [h.get(key) if _finite(h.get(key)) else float("nan") for h in hs], "o-",
                   color=f"C{col}", ms=3, label="progressive")
        elif not tx:
            b.text(0.5, 0.5, "no held-out set (run --test FILE)", transform=b.transAxes, ha="center",
                   va="center", fontsize=10, color="0.3")
        if tx:   # run --test / the demo: the held-out metric at each snapshot
            b.plot([x for x, _ in tx], [v for _, v in tx], "s--", color="C3", ms=3, label="held-out test")
            b.legend(loc="lower right", fontsize=8)
        b.set_ylabel(("progressive " if phase == "stream" else "test ") + name)
        xl = xlabel if phase == "stream" else "refinement passes"
        a.set_title("stream (progressive validation)" if phase == "stream" else "refinement after the stream")
        for axis in (a, b):
            axis.set_xlabel(xl)
            axis.grid(True, which="both", alpha=0.3)
            axis.xaxis.set_major_locator(MaxNLocator(nbins=5))
            axis.xaxis.set_major_formatter(thousands if phase == "stream" else FuncFormatter(lambda v, _: f"{v:g}"))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
