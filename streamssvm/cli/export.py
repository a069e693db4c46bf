"""``streamssvm export``: a dataset written as a stream file."""
from __future__ import annotations

import os


def cmd_export(args):
    """Write the bundled OCR data as JSONL examples (letters as a flat stream, or words); words
    to a ``.conll`` file as CoNLL (a line per letter: its 128 pixels, then the letter; a blank
    line between words)."""
    import streamssvm as ss
    from streamssvm.connectors.files import write_jsonl
    if args.what == "ocr-letters":
        import numpy as np
        recs = ({"x": {str(j): 1.0 for j in np.flatnonzero(x)}, "y": y}
                for x, y in ss.datasets.ocr_letter_stream("large", train=not args.test))
    else:
        X_tr, y_tr, X_te, y_te = ss.datasets.load_ocr("large")
        X, Y = (X_te, y_te) if args.test else (X_tr, y_tr)
        recs = ({"x": x.astype(int).tolist(), "y": [chr(97 + c) for c in y]} for x, y in zip(X, Y))
    if args.limit:
        import itertools
        recs = itertools.islice(recs, args.limit)
    if os.path.splitext(args.file)[1].lower() in (".conll", ".conllu", ".iob", ".bio"):
        if args.what != "ocr-words":
            raise ValueError("CoNLL holds sequences: export ocr-words to a .conll file (ocr-letters to .jsonl)")
        n = 0
        with open(args.file, "w", encoding="ascii") as f:
            for r in recs:
                for px, lab in zip(r["x"], r["y"]):
                    f.write(" ".join(str(v) for v in px) + f" {lab}\n")
                f.write("\n")
                n += 1
        print(f"wrote {n} examples to {args.file} (CoNLL)")
        return 0
    n = write_jsonl(args.file, recs)
    print(f"wrote {n} examples to {args.file}")
    return 0
