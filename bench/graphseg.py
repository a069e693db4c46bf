"""GraphSegmenter on noisy real silhouettes: structured (min-cut) segmentation against per-pixel
classification with the same unary features, and our numba max flow against PyMaxflow.

Data (a documented construction from one real labelled image): scikit-image's bundled
``skimage.data.horse()`` (a 328 x 400 binary silhouette, offline in the wheel). Each example is
a random crop (70-100% of the image, random left-right flip) resized to ``--size`` pixels on its
long side; its mask is the label (horse = 1); the observed image is the mask blurred (Gaussian,
sigma 1.5 px), shifted to contrast ``0.5``, plus Gaussian noise (sigma ``--noise``). Pixel grid
graph (4-neighbours). Unary features per pixel: the noisy intensity, its 3x3 mean and a bias.
 Edge features: a constant and the contrast term exp(-beta (I_a - I_b)^2) with beta the
inverse of twice the mean squared neighbour difference (Rother, Kolmogorov & Blake's GrabCut
convention). Training and test images use different crops and noise.

Methods (same run, same features):
  * GraphSegmenter, BCFW(nonneg="pairwise", lam), the stream once then ``refine`` passes;
  * the same model's unary part alone (per-pixel decision with its learned unary weights);
  * MulticlassSSVM (BCFW) on every training pixel as an independent example;
  * scikit-learn LinearSVC on every training pixel (C picked on the training set);
  * LinearSVC unaries + PyMaxflow cut with a Potts weight chosen on the training images (a
    two-stage "piecewise" CRF), where PyMaxflow installs.
Max flow: our numba Dinic vs PyMaxflow (Boykov-Kolmogorov) on the test images' energies.

    python bench/graphseg.py              # writes bench/results/graphseg.{md,json}
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

from bench._common import Clock, fmt, log, table_head, write_results  # noqa: E402


def make_images(n, size, noise, seed):
    from skimage import data, transform
    from scipy import ndimage
    mask_full = ~data.horse()
    H, W = mask_full.shape
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = rng.uniform(0.7, 1.0)
        h, w = int(H * f), int(W * f)
        r0, c0 = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
        m = mask_full[r0:r0 + h, c0:c0 + w]
        if rng.random() < 0.5:
            m = m[:, ::-1]
        s = size / max(h, w)
        m = transform.resize(m.astype(float), (max(int(h * s), 2), max(int(w * s), 2)), order=1,
                             anti_aliasing=True) > 0.5
        img = 0.5 * ndimage.gaussian_filter(m.astype(float), 1.5) + rng.normal(0, noise, m.shape)
        out.append((img, m.astype(np.int32)))
    return out


def graph_of(img):
    from scipy import ndimage
    H, W = img.shape
    idx = np.arange(H * W).reshape(H, W)
    ea = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    eb = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    I = img.ravel()
    diff2 = (I[ea] - I[eb]) ** 2
    beta = 1.0 / (2.0 * max(diff2.mean(), 1e-12))
    X = np.c_[I, ndimage.uniform_filter(img, 3).ravel(), np.ones(H * W)]
    F = np.c_[np.ones(len(ea)), np.exp(-beta * diff2)]
    return {"nodes": X, "edges": np.c_[ea, eb], "edge_features": F}


def superpixel_graph(img, mask, n_segments):
    """SLIC superpixels (Achanta et al. 2012) of ``img`` (smoothed, sigma 1 px) as a general graph: nodes = superpixels
    (features: mean intensity, its standard deviation, a bias), edges = adjacent superpixels
    (features: a constant and exp(-beta (mean_a - mean_b)^2)); the label of a node is its
    majority mask value. Returns (record, node labels, the superpixel map)."""
    from scipy import ndimage
    from skimage.segmentation import slic
    seg = slic(ndimage.gaussian_filter(img, 1.0), n_segments=n_segments, compactness=0.1, channel_axis=None,
               start_label=0)
    k = int(seg.max()) + 1
    cnt = np.bincount(seg.ravel(), minlength=k).astype(float)
    mean = np.bincount(seg.ravel(), img.ravel(), minlength=k) / np.maximum(cnt, 1)
    sq = np.bincount(seg.ravel(), img.ravel() ** 2, minlength=k) / np.maximum(cnt, 1)
    std = np.sqrt(np.maximum(sq - mean ** 2, 0.0))
    y = (np.bincount(seg.ravel(), mask.ravel(), minlength=k) / np.maximum(cnt, 1) > 0.5).astype(int)
    pairs = np.concatenate([np.c_[seg[:, :-1].ravel(), seg[:, 1:].ravel()], np.c_[seg[:-1, :].ravel(), seg[1:, :].ravel()]])
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = np.unique(np.sort(pairs, axis=1), axis=0)
    keep = cnt > 0
    assert keep.all()
    diff2 = (mean[pairs[:, 0]] - mean[pairs[:, 1]]) ** 2
    beta = 1.0 / (2.0 * max(diff2.mean(), 1e-12))
    rec = {"nodes": np.c_[mean, std, np.ones(k)], "edges": pairs,
           "edge_features": np.c_[np.ones(len(pairs)), np.exp(-beta * diff2)]}
    return rec, y, seg


def pixel_error(preds, ys):
    return float(np.mean(np.concatenate([np.asarray(p) != y.ravel() for p, y in zip(preds, ys)])))


def pymaxflow_cut(theta, ea, eb, pen):
    import maxflow
    n = theta.shape[0]
    g = maxflow.Graph[float](n, len(ea))
    nodes = g.add_nodes(n)
    g.add_edges(ea, eb, pen, pen) if hasattr(g, "add_edges") else [g.add_edge(int(a), int(b), p, p)
                                                                   for a, b, p in zip(ea, eb, pen)]
    d = theta[:, 1] - theta[:, 0]
    g.add_grid_tedges(nodes, np.maximum(d, 0), np.maximum(-d, 0))
    g.maxflow()
    return (~g.get_grid_segments(nodes)).astype(np.int32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=40)
    ap.add_argument("--test", type=int, default=20)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=1e-2)
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--superpixels", type=int, default=150)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "graphseg"))
    a = ap.parse_args(argv)
    import streamssvm as ss
    from streamssvm._kernels import maxflow as MF
    from streamssvm.structures.graph import BinaryGraph

    train = make_images(a.train, a.size, a.noise, a.seed)
    test = make_images(a.test, a.size, a.noise, a.seed + 1)
    gtr = [graph_of(img) for img, _ in train]
    gte = [graph_of(img) for img, _ in test]
    ytr = [m.ravel() for _, m in train]
    yte = [m for _, m in test]
    n_pix = sum(len(y) for y in ytr)
    log(f"{a.train} train / {a.test} test images, {n_pix} train pixels")
    rows, res = [], {"args": vars(a), "train_pixels": n_pix}

    # warm the kernels (compilation is not counted)
    warm = ss.GraphSegmenter(learner=ss.learners.BCFW(lam=a.lam, nonneg="pairwise"))
    warm.learn_one(gtr[0], ytr[0])
    warm.predict_one(gte[0])

    # 1. GraphSegmenter
    m = ss.GraphSegmenter(learner=ss.learners.BCFW(lam=a.lam, nonneg="pairwise", seed=a.seed))
    with Clock() as c1:
        for x, y in zip(gtr, ytr):
            m.learn_one(x, y)
    e_stream = pixel_error([m.predict_one(x) for x in gte], yte)
    with Clock() as c2:
        m.refine(passes=a.passes)
    cert = m.certificate()
    with Clock() as cp:
        preds = [m.predict_one(x) for x in gte]
    e_graph = pixel_error(preds, yte)
    W = m.unary_weights
    e_unary = pixel_error([(np.asarray(x["nodes"]) @ (W[:, 1] - W[:, 0]) > 0).astype(int) for x in gte], yte)
    res["graphseg"] = {"err_after_stream": e_stream, "err": e_graph, "err_unary_part": e_unary,
                       "stream_cpu": c1.cpu, "stream_wall": c1.wall, "refine_cpu": c2.cpu, "refine_wall": c2.wall,
                       "predict_cpu": cp.cpu, "gap": cert.gap, "primal": cert.primal,
                       "pairwise_weights": m.pairwise_weights.tolist()}
    rows.append(("GraphSegmenter, stream once", e_stream, c1.cpu, c1.wall))
    rows.append((f"GraphSegmenter, + {a.passes} refine passes (gap {cert.gap:.2g})", e_graph, c1.cpu + c2.cpu,
                 c1.wall + c2.wall))
    rows.append(("  its unary part alone (per pixel)", e_unary, None, None))
    log(f"graph: err {e_graph:.4f} (stream {e_stream:.4f}, unary {e_unary:.4f}) gap {cert.gap:.3g}")

    # 1b. BCFW variants under the constraint: gap and test error after the same passes
    variants = []
    for name, kw in (("fw", {}), ("fw + cache", {"cache": True}), ("pairwise", {"step": "pairwise"}),
                     ("pairwise + cache", {"step": "pairwise", "cache": True}), ("away", {"step": "away"})):
        mv = ss.GraphSegmenter(learner=ss.learners.BCFW(lam=a.lam, nonneg="pairwise", seed=a.seed, **kw))
        with Clock() as cv:
            for x, y in zip(gtr, ytr):
                mv.learn_one(x, y)
            mv.refine(passes=a.passes)
        cv_cert = mv.certificate()
        eng = mv.bound_learner
        ev = pixel_error([mv.predict_one(x) for x in gte], yte)
        variants.append({"variant": name, "gap": cv_cert.gap, "iterate_gap": cv_cert.extra["iterate_gap"],
                         "primal": cv_cert.primal, "err": ev, "cpu": cv.cpu, "wall": cv.wall,
                         "oracle_calls": eng.oracle_calls, "cache_hits": eng.cache_hits})
        log(f"variant {name}: gap {cv_cert.gap:.3g} err {ev:.4f} cpu {cv.cpu:.2f}")
    res["variants"] = variants

    # 2. independent per-pixel classification, same unary features
    Xtr = np.concatenate([np.asarray(x["nodes"]) for x in gtr])
    Ytr = np.concatenate(ytr)
    Xte = [np.asarray(x["nodes"]) for x in gte]
    mc = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=a.lam, seed=a.seed), scale=False)
    mc.learn_many(Xtr[:10], Ytr[:10])
    mc = ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=a.lam, seed=a.seed), scale=False)
    with Clock() as c3:
        mc.learn_many(Xtr, Ytr)
        mc.refine(passes=5)
    e_mc = pixel_error([np.asarray(mc.predict_many(X)) for X in Xte], yte)
    rows.append(("MulticlassSSVM per pixel (BCFW, + 5 passes)", e_mc, c3.cpu, c3.wall))
    res["multiclass_pixels"] = {"err": e_mc, "cpu": c3.cpu, "wall": c3.wall}
    log(f"multiclass per pixel: {e_mc:.4f}")

    best = None
    with Clock() as c4:
        for C in (0.01, 0.1, 1.0):
            clf = LinearSVC(C=C, dual=False).fit(Xtr, Ytr)
            acc = clf.score(Xtr, Ytr)
            if best is None or acc > best[0]:
                best = (acc, C, clf)
    clf = best[2]
    e_svc = pixel_error([clf.predict(X) for X in Xte], yte)
    rows.append((f"scikit-learn LinearSVC per pixel (C = {best[1]})", e_svc, c4.cpu, c4.wall))
    res["linearsvc_pixels"] = {"err": e_svc, "cpu": c4.cpu, "wall": c4.wall, "C": best[1]}
    log(f"LinearSVC per pixel: {e_svc:.4f}")

    # 3. two-stage peer: LinearSVC unaries + Potts cut by PyMaxflow, Potts weight tuned on train
    try:
        import maxflow  # noqa: F401
        have_pmf = True
    except ImportError:
        have_pmf = False
    if have_pmf:
        def two_stage(x, beta_w):
            X = np.asarray(x["nodes"])
            s = clf.decision_function(X)
            theta = np.c_[-0.5 * s, 0.5 * s]
            E = np.asarray(x["edges"])
            pen = beta_w * np.asarray(x["edge_features"])[:, 1]
            return pymaxflow_cut(theta, E[:, 0].astype(np.int64), E[:, 1].astype(np.int64), pen)
        with Clock() as c5:
            grid = [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
            errs = [pixel_error([two_stage(x, b) for x in gtr], [y.reshape(1, -1) for y in ytr]) for b in grid]
            bw = grid[int(np.argmin(errs))]
        e_two = pixel_error([two_stage(x, bw) for x in gte], yte)
        rows.append((f"LinearSVC + PyMaxflow Potts cut (contrast weight {bw}, tuned on train)", e_two,
                     c4.cpu + c5.cpu, c4.wall + c5.wall))
        res["two_stage_pymaxflow"] = {"err": e_two, "weight": bw, "cpu": c4.cpu + c5.cpu}
        log(f"two-stage: {e_two:.4f}")

    # 3b. superpixel graphs (general graphs): GraphSegmenter vs LinearSVC on the same node features
    sp = None
    try:
        import skimage.segmentation  # noqa: F401
        sp = True
    except ImportError:
        pass
    if sp:
        sptr = [superpixel_graph(img, mk, a.superpixels) for img, mk in train]
        spte = [superpixel_graph(img, mk, a.superpixels) for img, mk in test]
        ms = ss.GraphSegmenter(learner=ss.learners.BCFW(lam=a.lam, nonneg="pairwise", seed=a.seed))
        with Clock() as c10:
            for rec, y, _ in sptr:
                ms.learn_one(rec, y)
            ms.refine(passes=a.passes)
        spc = ms.certificate()

        def back(seg, node_labels):
            return np.asarray(node_labels)[seg].ravel()
        e_sp = pixel_error([back(seg, ms.predict_one(rec)) for rec, _, seg in spte], yte)
        e_sp_best = pixel_error([back(seg, y) for _, y, seg in spte], yte)   # superpixels' own limit
        Xs = np.concatenate([r["nodes"] for r, _, _ in sptr])
        Ys = np.concatenate([y for _, y, _ in sptr])
        bs = None
        with Clock() as c11:
            for C in (0.01, 0.1, 1.0, 10.0):
                cl = LinearSVC(C=C, dual=False).fit(Xs, Ys)
                acc = cl.score(Xs, Ys)
                if bs is None or acc > bs[0]:
                    bs = (acc, C, cl)
        e_sp_svc = pixel_error([back(seg, bs[2].predict(rec["nodes"])) for rec, _, seg in spte], yte)
        nn = int(np.mean([len(y) for _, y, _ in sptr]))
        ne = int(np.mean([len(r["edges"]) for r, _, _ in sptr]))
        res["superpixels"] = {"nodes_mean": nn, "edges_mean": ne, "err_graph": e_sp, "err_linearsvc": e_sp_svc,
                              "err_oracle_labels": e_sp_best, "graph_cpu": c10.cpu, "graph_wall": c10.wall,
                              "svc_cpu": c11.cpu, "gap": spc.gap, "pairwise_weights": ms.pairwise_weights.tolist()}
        log(f"superpixels: graph {e_sp:.4f} svc {e_sp_svc:.4f} limit {e_sp_best:.4f}")

    # 4. max flow: ours vs PyMaxflow on the learned test energies
    w = m.bound_learner.predict_weights()
    g = m.bound_learner.structure
    energies = []
    for x in gte:
        rec = BinaryGraph.record(x)
        energies.append((rec,) + g.potentials(rec, w))
    with Clock() as c6:
        ours = []
        for rec, theta, pen in energies:
            out = np.zeros(rec.n, dtype=np.int32)
            ours.append(MF.binary_map(theta, rec.ea, rec.eb, pen, out))
    flow = {"graphs": len(energies), "nodes": int(energies[0][0].n), "ours_cpu": c6.cpu, "ours_wall": c6.wall}
    if have_pmf:
        with Clock() as c7:
            peer = [MF.labeling_score(theta, rec.ea, rec.eb, pen, pymaxflow_cut(theta, rec.ea, rec.eb, pen))
                    for rec, theta, pen in energies]
        flow.update(pymaxflow_cpu=c7.cpu, pymaxflow_wall=c7.wall,
                    max_score_diff=float(np.max(np.abs(np.array(ours) - np.array(peer)))))
    # a larger grid: the full-resolution energy of one test image
    big = make_images(1, 400, a.noise, a.seed + 2)[0][0]
    xb = graph_of(big)
    rec = BinaryGraph.record(xb)
    theta, pen = g.potentials(rec, w)
    out = np.zeros(rec.n, dtype=np.int32)
    with Clock() as c8:
        sb = MF.binary_map(theta, rec.ea, rec.eb, pen, out)
    flow.update(big_nodes=int(rec.n), big_ours_cpu=c8.cpu)
    if have_pmf:
        with Clock() as c9:
            yb = pymaxflow_cut(theta, rec.ea, rec.eb, pen)
        flow.update(big_pymaxflow_cpu=c9.cpu, big_diff=float(abs(sb - MF.labeling_score(theta, rec.ea, rec.eb, pen, yb))))
    res["maxflow"] = flow
    log(f"maxflow: {flow}")

    lines = ["# GraphSegmenter on noisy horse silhouettes (skimage.data.horse)", "",
             f"{a.train} training / {a.test} test images of ~{a.size} px on the long side "
             f"({n_pix} training pixels), noise sigma {a.noise}, lam = {a.lam}; construction in "
             "`bench/graphseg.py`'s docstring. Machine shared, 1 BLAS thread, kernels compiled before timing.", "",
             *table_head("method", "test pixel error", "CPU s (train)", "wall s (train)")]
    for name, err, cpu, wall in rows:
        lines.append(f"| {name} | {err:.4f} | {fmt(cpu)} | {fmt(wall)} |")
    lines += ["", f"Learned pairwise weights (constant, contrast): {np.round(m.pairwise_weights, 4).tolist()}.", "",
              f"## BCFW variants under the positivity constraint (stream once + {a.passes} passes, averaging on)", "",
              *table_head("variant", "certified gap (averaged w)", "iterate gap", "test pixel error",
                          "oracle calls", "cache hits", "CPU s", "wall s")]
    for v in variants:
        lines.append(f"| {v['variant']} | {v['gap']:.3g} | {v['iterate_gap']:.3g} | {v['err']:.4f} | {v['oracle_calls']} "
                     f"| {v['cache_hits']} | {fmt(v['cpu'])} | {fmt(v['wall'])} |")
    lines += ["",
              *([] if not sp else [
                  f"## Superpixel graphs (SLIC, ~{res['superpixels']['nodes_mean']} nodes / "
                  f"{res['superpixels']['edges_mean']} edges per image: general graphs)", "",
                  "Node features: mean intensity, its standard deviation, a bias; edges between adjacent "
                  "superpixels (a constant and the contrast of the means). Errors are per pixel, after "
                  "painting each superpixel with its node's label.", "",
                  *table_head("method", "test pixel error", "CPU s (train)"),
                  f"| GraphSegmenter (+ {a.passes} passes, gap {res['superpixels']['gap']:.2g}) | "
                  f"{res['superpixels']['err_graph']:.4f} | {fmt(res['superpixels']['graph_cpu'])} |",
                  f"| LinearSVC per superpixel (C picked on train) | {res['superpixels']['err_linearsvc']:.4f} | "
                  f"{fmt(res['superpixels']['svc_cpu'])} |",
                  f"| the true majority label of every superpixel (the graph's limit) | "
                  f"{res['superpixels']['err_oracle_labels']:.4f} | — |", ""]),
              "## Max flow: numba Dinic (ours) vs PyMaxflow (Boykov-Kolmogorov)", "",
              *table_head("energies", "ours CPU s", "PyMaxflow CPU s (incl. graph building)", "max |score diff|"),
              f"| {flow['graphs']} test images (~{flow['nodes']} nodes each) | {fmt(flow['ours_cpu'])} | "
              f"{fmt(flow.get('pymaxflow_cpu'))} | {fmt(flow.get('max_score_diff'))} |",
              f"| one {flow['big_nodes']}-node grid | {fmt(flow['big_ours_cpu'])} | {fmt(flow.get('big_pymaxflow_cpu'))} "
              f"| {fmt(flow.get('big_diff'))} |"]
    res["when"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    res["load"] = os.getloadavg()
    write_results(a.out, res, lines)


if __name__ == "__main__":
    main()
