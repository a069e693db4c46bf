"""``streamssvm inspect``: read a saved model (size, lambda, examples held, the certificate, the
top-weighted features of every label or tag, a chain's transition table), as text or ``--json``."""
from __future__ import annotations

import json
import os


def cmd_inspect(args):
    """Print what :func:`streamssvm.inspection.summarize` reads from the model file."""
    import streamssvm as ss

    from ..inspection import summarize, text
    from .options import strict_json
    model = ss.load(args.model)
    s = summarize(model, top=args.top, certify=not args.no_certificate)
    s["file"] = str(args.model)
    s["size_bytes"] = os.path.getsize(args.model)
    if args.json:
        print(json.dumps(strict_json(s), indent=2, allow_nan=False))
    else:
        print(text(s, top=args.top))
    return 0


def add_inspect_parser(sub, fmt):
    ins = sub.add_parser("inspect", help="read a saved model: size, lambda, examples held, certificate, top "
                         "features per label, transitions", **fmt)
    ins.add_argument("model", help="a model saved by run --save or estimator.save()")
    ins.add_argument("--top", type=int, default=10, help="features listed per label or tag (default: 10)")
    ins.add_argument("--json", action="store_true", help="machine-readable output (strict JSON)")
    ins.add_argument("--no-certificate", action="store_true", help="skip the certificate (a full pass over the "
                     "examples the model holds)")
    ins.set_defaults(func=cmd_inspect)
    return ins
