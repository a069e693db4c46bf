"""A streamssvm classifier inside a river pipeline, evaluated by progressive validation.

    python examples/river_pipeline.py
"""
from river import compose, datasets, evaluate, metrics, preprocessing

import streamssvm as ss


def main():
    model = compose.Pipeline(
        preprocessing.StandardScaler(),
        ss.MulticlassSSVM(learner=ss.learners.BCFW(lam=1e-2, replay=2, seed=0)),
    )
    acc = evaluate.progressive_val_score(datasets.ImageSegments(), model, metrics.Accuracy(),
                                         print_every=500)
    print(f"progressive accuracy on ImageSegments: {acc.get():.4f}")
    ssvm = model["MulticlassSSVM"]
    cert = ssvm.certificate()
    print(f"duality gap on the {cert.n_blocks} held examples: {cert.gap:.4g} "
          f"(primal {cert.primal:.4g}, dual {cert.dual:.4g})")
    cert = ssvm.refine(passes=20, certify=True)
    print(f"after 20 refinement passes: gap {cert.gap:.4g}")


if __name__ == "__main__":
    main()
