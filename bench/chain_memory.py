"""Memory of a chain model on Brown (issue 22 item 9): where the bytes of a ``SequenceTagger``'s
block store go, and the peak RSS against python-crfsuite in the same run.

Each row runs in its own subprocess (peak RSS = that process's ``ru_maxrss``), one after the
other; run the script under the machine-wide lock with one BLAS thread:

    OPENBLAS_NUM_THREADS=1 flock /tmp/bench.lock nice -n 0 python3 bench/chain_memory.py --sentences 10000

Each checkout's kernels are compiled into its cache by a discarded process before its row (a
checkout unpacked in a new folder would otherwise compile inside its measured row, and LLVM's
memory would sit under that row's peak: the same code read 1340 MB cold against 1238 MB cached).

Rows (the first N Brown training sentences, fine tags, the features of ``bench/gdmm_brown.py``;
the tag set is the tags of those sentences, what a stream sees):

* ``data``: the process after loading the sentences, nothing learned (the floor both peers pay);
* ``streamssvm``: the process with the library imported and its kernels loaded (one tiny
  model learned), then ``SequenceTagger(BCFW defaults)`` learning the sentences in one stream
  (``learn_many``), the store by segment (token values and indices, Gram matrices, the emission
  statistic M = L x Kc, how many of its entries are nonzero and how many distinct tags each block's
  rows use, the transition pairs, pools), the
  weights (E and the averaging Z) and the process's peak RSS;
* ``crfsuite``: python-crfsuite's averaged perceptron, one iteration, on the same sentences and
  features.

Writes bench/results/chain_memory.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
MB = 1 / 2**20


sys.path.insert(0, HERE)
# the peak-RSS reader and python-crfsuite's averaged perceptron (one iteration, the same Brown
# sentences) are the ones bench/models_hotpath.py measures its rows with
from models_hotpath import _rss_mb, child_crfsuite  # noqa: E402


def _vmrss_mb():
    """The process's resident set now (``/proc/self/status`` VmRSS; None where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _brown(n):
    sys.path.insert(0, HERE)
    import gdmm_brown as gb
    tr, _, _ = gb.load("fine", n, 1)
    X, Y = [x for x, _ in tr], [y for _, y in tr]
    return X, Y, sorted({t for y in Y for t in y})


def child_data(n):
    import gc
    X, Y, tags = _brown(n)
    gc.collect()
    return {"sentences": len(X), "tokens": sum(map(len, Y)), "tags": len(tags), "peak_rss_mb": _rss_mb(),
            "live_rss_mb": _vmrss_mb()}   # what the loaded corpus keeps resident (its load peaks above it)


def child_streamssvm(n):
    import numpy as np
    import streamssvm as ss
    from streamssvm._kernels import layout as KL
    from streamssvm._kernels.common import py_entry
    w = ss.SequenceTagger()   # the kernels loaded outside the measurement
    w.learn_one([{"a": 1.0}, {"b": 1.0}], ["x", "y"])
    X, Y, tags = _brown(n)
    rss0 = _rss_mb()
    m = ss.SequenceTagger(learner=ss.learners.BCFW(seed=0), labels=tags)
    c0, w0 = time.process_time(), time.perf_counter()
    m.learn_many(X, Y)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    peak = _rss_mb()   # before the analysis below allocates anything
    live_end = _vmrss_mb()   # equal to the peak: the peak is the end state, not a transient
    lr = m._learner
    st = lr.store
    Kc = int(st.Kc)
    slots = st.slots()
    meta = st.meta[slots]
    L, nnz = meta[:, KL.M_L].astype(np.int64), meta[:, KL.M_NNZ].astype(np.int64)
    flags = meta[:, KL.M_FLAGS]
    nidx = np.where(flags & KL.FLAG_DENSE_ROW, 0, nnz)
    gram = np.where(flags & KL.FLAG_NO_GRAM, 0, L * L)
    isz, fsz = meta[:, KL.M_ISIZE].astype(np.int64), meta[:, KL.M_FSIZE].astype(np.int64)
    pool_i = meta[:, KL.M_PCAP] * meta[:, KL.M_LABLEN]
    nzM, tcap, union, room = [], [], [], []
    # M as per-token entries (a checkout before them: over each sparse block's own tags, a tag
    # room; before those: L x Kc)
    entries = hasattr(st, "_entries")
    rooms = not entries and hasattr(st, "_room")
    for s in slots:
        sp, kpos = py_entry(KL.pairs_pos)(st.meta, s)
        Lb = int(st.meta[s, KL.M_L])
        if entries and sp:
            Mb = st._emission(s, st._stat_pos(s)) != 0
            room.append(st._m_len(s)[1])   # the block's entry capacity ecap
        elif rooms and sp:
            Mb = st._emission(s, st._stat_pos(s)) != 0
            room.append(Lb * st._room(s)[2])
        else:
            Mb = np.asarray(st.block(s)["stat"][:Lb * Kc]).reshape(Lb, Kc) != 0
            room.append(Lb * Kc)
        nzM.append(np.count_nonzero(Mb, axis=1))
        union.append(int(Mb.any(axis=0).sum()))   # the tags any of the block's labelings put on a token
        tcap.append(int(st.Iar[kpos + 1]) if sp else 0)
    nzM = np.concatenate(nzM) if nzM else np.zeros(1, dtype=np.int64)
    tcap = np.asarray(tcap, dtype=np.int64)
    union = np.asarray(union, dtype=np.int64)
    room = np.asarray(room, dtype=np.int64)
    Mkey = ("emission statistic M (entry values, ecap)" if entries else
            "emission statistic M (L x tag room)" if rooms else "emission statistic M (L x Kc)")
    sparse = flags & KL.FLAG_SPARSE != 0
    segs = {
        "token values (fval)": nnz.sum() * 8,
        "feature indices + token pointers": (nidx + L + 1).sum() * 4,
        "Gram matrices (L x L)": gram.sum() * 8,
        Mkey: room.sum() * 8,   # (room: M's floats per block)
        # (sparse chain blocks keep none: their BM rows are M's first and last rows)
        "start/end statistic BM (2 x Kc)": int(np.count_nonzero(~flags & KL.FLAG_SPARSE)) * 2 * Kc * 8,
        "transition pairs (ints) + counts (floats)": (2 + 2 * tcap).sum() * 4 + tcap.sum() * 8,
        "tag rooms' tag lists (ints)": ((2 + room // L) * sparse).sum() * 4 if rooms else 0,
        "M entries' tags + token pointers (ints)": ((3 + L + room) * sparse).sum() * 4 if entries else 0,
        "pool labelings (ints) + alphas": pool_i.sum() * 4 + meta[:, KL.M_PCAP].sum() * 8,
    }
    live = float(isz.sum() * 4 + fsz.sum() * 8)
    segs["other (truth, averaging accumulators)"] = live - sum(segs.values())
    Z = getattr(lr, "_Z", None)
    return {"tags": len(tags), "Kc": Kc, "tokens": int(L.sum()), "blocks": len(slots), "cpu_s": cpu, "wall_s": wall,
            "features": int(lr.W.E.shape[0]),
            "segments_mb": {k: float(v) * MB for k, v in segs.items()},
            "store_live_mb": live * MB, "store_allocated_mb": st.allocated_bytes() * MB,
            "weights_E_mb": lr.W.E.nbytes * MB, "averaging_Z_mb": (Z.E.nbytes if Z is not None else 0) * MB,
            "M_nonzero_frac": float(nzM.sum() / max((L * Kc).sum(), 1)), "M_room_mean": float((room / L).mean()),
            "M_room_frac_of_Kc": float(room.sum() / max((L * Kc).sum(), 1)),
            "M_nonzero_per_token_mean": float(nzM.mean()), "M_nonzero_per_token_max": int(nzM.max()),
            "M_as_pairs_mb": float(nzM.sum() * 12 * MB), "tcap_mean": float(tcap.mean()),
            "M_tag_union_mean": float(union.mean()), "M_tag_union_max": int(union.max()),
            # M kept as L x (the block's own tags) floats plus the block's tag list (int32)
            "M_as_block_tags_mb": float(((L * union).sum() * 8 + union.sum() * 4) * MB),
            "vmrss_end_mb": live_end,
            "rss_before_mb": rss0, "peak_rss_mb": peak}


#: compiles a checkout's kernels into its cache: run (and discarded) before that checkout's
#: measured row, so that no row's peak holds LLVM's compile-time memory (a checkout unpacked in a new
#: folder compiles on its first run: the same code read 1340 MB cold against 1238 MB cached)
#: (40 tags: the sparse Viterbi, compiled once a model reaches 32 tags, too)
_WARM = ('import streamssvm as ss; t = ss.SequenceTagger(labels=[str(k) for k in range(40)]); '
         't.learn_one([{"a": 1.0}, {"b": 1.0}], ["1", "2"]); t.predict_one([{"a": 1.0}])')


def _warm(checkout):
    subprocess.run([sys.executable, "-c", _WARM], capture_output=True, text=True, check=True,
                   env=dict(os.environ, PYTHONPATH=checkout))


def _run(kind, n):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, "--sentences", str(n)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=10000)
    ap.add_argument("--child", choices=["data", "streamssvm", "crfsuite"])
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--before", help="a checkout of the code before a change: its streamssvm row is run too")
    ap.add_argument("--before-commit", help="the commit of --before, for the report")
    ap.add_argument("--report", action="store_true", help="re-render chain_memory.md from chain_memory.json")
    a = ap.parse_args(argv)
    if a.report:
        with open(os.path.join(a.out, "chain_memory.json")) as f:
            write_report(json.load(f), a.out)
        return
    if a.child:
        fn = {"data": child_data, "streamssvm": child_streamssvm, "crfsuite": child_crfsuite}[a.child]
        print(json.dumps(fn(a.sentences)), flush=True)
        return
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    res = {"command": "python3 bench/chain_memory.py --sentences %d" % a.sentences, "machine": platform.machine(),
           "cores": os.cpu_count()}
    _warm(os.path.dirname(HERE))
    for kind in ("data", "streamssvm", "crfsuite"):
        res[kind] = _run(kind, a.sentences)
        log(f"{kind}: {json.dumps(res[kind])}")
    if a.before:   # the streamssvm row of the code at another checkout, run from there
        _warm(a.before)
        bs = json.loads(subprocess.run(
            [sys.executable, os.path.join(a.before, "bench", "chain_memory.py"), "--child", "streamssvm",
             "--sentences", str(a.sentences)], capture_output=True, text=True, check=True,
            env=dict(os.environ, PYTHONPATH=a.before)).stdout.strip().splitlines()[-1])
        seg = bs["segments_mb"]
        res["before"] = {"commit": a.before_commit or a.before, "peak_rss_mb": bs["peak_rss_mb"],
                         "store_live_mb": bs["store_live_mb"], "gram_mb": seg["Gram matrices (L x L)"],
                         "M_mb": _m_mb(seg),
                         "store_allocated_mb": bs["store_allocated_mb"], "wall_s": bs["wall_s"],
                         "bm_mb": seg["start/end statistic BM (2 x Kc)"], "cpu_s": bs["cpu_s"]}
        log(f"before: {json.dumps(res['before'])}")
    res["ratio_peak_rss"] = res["streamssvm"]["peak_rss_mb"] / res["crfsuite"]["peak_rss_mb"]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "chain_memory.json"), "w") as f:
        json.dump(res, f, indent=1)
    write_report(res, a.out)


def _m_mb(seg):
    """MB of the emission statistic M in a row's segments (whichever layout the checkout has)."""
    return next(v for k, v in seg.items() if k.startswith("emission statistic M"))


def write_report(res, out):
    """bench/results/chain_memory.md from the measurements (``--report`` re-renders the json)."""
    d, s, c = res["data"], res["streamssvm"], res["crfsuite"]
    M = _m_mb(s["segments_mb"])
    sparse_peak = s["peak_rss_mb"] - M + s["M_as_pairs_mb"]
    lines = [f"# Chain model memory on Brown (`{res['command']}`)", "",
             f"First {d['sentences']:,} Brown training sentences ({d['tokens']:,} tokens, {d['tags']} fine tags seen, "
             f"{s['features']:,} features); one process per row, peak RSS = ru_maxrss (includes loading the corpus).", "",
             "| process | peak RSS MB | above the data MB | CPU s | wall s |", "|---|---|---|---|---|",
             f"| corpus loaded, nothing learned | {d['peak_rss_mb']:.0f} | 0 | | |",
             f"| streamssvm imported, its kernels loaded, corpus loaded, nothing learned | {s['rss_before_mb']:.0f} | "
             f"{s['rss_before_mb'] - d['peak_rss_mb']:.0f} | | |",
             f"| streamssvm SequenceTagger, BCFW stream | {s['peak_rss_mb']:.0f} | {s['peak_rss_mb'] - d['peak_rss_mb']:.0f} | "
             f"{s['cpu_s']:.1f} | {s['wall_s']:.1f} |",
             f"| python-crfsuite AP, 1 iteration | {c['peak_rss_mb']:.0f} | {c['peak_rss_mb'] - d['peak_rss_mb']:.0f} | "
             f"{c['cpu_s']:.1f} | {c['wall_s']:.1f} |", "",
             f"Ratio of peak RSS streamssvm / CRFsuite: **{res['ratio_peak_rss']:.2f}** (target <= 2).", "",
             f"| where streamssvm's bytes go (Kc = {s['Kc']}, {s['blocks']:,} blocks) | MB |", "|---|---|"]
    for k, v in s["segments_mb"].items():
        lines.append(f"| store: {k} | {v:.1f} |")
    lines += [f"| store live (sum) | {s['store_live_mb']:.1f} |",
              f"| store arenas allocated | {s['store_allocated_mb']:.1f} |",
              f"| weights E ({s['features']:,} x Kc) | {s['weights_E_mb']:.1f} |",
              f"| averaging Z | {s['averaging_Z_mb']:.1f} |", "",
              f"M is {s['M_nonzero_frac']:.2%} nonzero ({s['M_nonzero_per_token_mean']:.2f} tags per token on average, "
              f"at most {s['M_nonzero_per_token_max']}): as (tag, value) pairs it would take {s['M_as_pairs_mb']:.1f} MB "
              f"instead of {M:.1f}.", ""]
    if "M_tag_union_mean" in s:   # (a json written before these were measured has none)
        lines += [f"A block's rows use {s['M_tag_union_mean']:.1f} distinct tags on average (at most "
                  f"{s['M_tag_union_max']}) of Kc = {s['Kc']}: M as L x (the block's own tags) with its tag list "
                  f"would take {s['M_as_block_tags_mb']:.1f} MB (no slack for tags still to come). Resident set "
                  f"when the stream ends: {s['vmrss_end_mb'] or float('nan'):.0f} MB, peak {s['peak_rss_mb']:.0f} MB "
                  "(equal: the peak is the live end state, not a transient).", "",
                  "Per block instead of per token (an estimate, not measured): M as the block's own tag columns would take the "
                  f"peak to about {s['peak_rss_mb'] - M + s['M_as_block_tags_mb']:.0f} MB "
                  f"({(s['peak_rss_mb'] - M + s['M_as_block_tags_mb']) / c['peak_rss_mb']:.2f}x CRFsuite) before any "
                  "room for tags still to come (measured instead: a room of the truth's distinct tags + 8 made "
                  "steps wait for room, which changes the trajectory, and raised the peak with the segments moved).", ""]
    if d.get("live_rss_mb"):   # the end state, term by term (the corpus's load peaks above what it keeps)
        lib = s["rss_before_mb"] - d["peak_rss_mb"]
        parts = d["live_rss_mb"] + lib + s["store_live_mb"] + s["weights_E_mb"] + s["averaging_Z_mb"]
        lines += [f"The end state, term by term: the corpus keeps {d['live_rss_mb']:.0f} MB resident once loaded "
                  f"(its load peaks at {d['peak_rss_mb']:.0f}, which is CRFsuite's whole peak), the library with its "
                  f"loaded kernels {lib:.0f} (numba's own import and first compiled call are most of it), the store "
                  f"{s['store_live_mb']:.0f}, E {s['weights_E_mb']:.0f} and Z {s['averaging_Z_mb']:.0f}: "
                  f"{parts:.0f} MB against the measured {s['peak_rss_mb']:.0f}. At most 2x ({2 * c['peak_rss_mb']:.0f} MB) "
                  f"leaves {2 * c['peak_rss_mb'] - (d['live_rss_mb'] + lib + s['weights_E_mb'] + s['averaging_Z_mb']):.0f} MB "
                  "for the store beside the corpus, the library and the dense E and Z.", ""]
    entry_ints = s["segments_mb"].get("M entries' tags + token pointers (ints)", 0.0)
    entries = entry_ints > 0
    rest = (f"the dense weights E and their average Z ({s['weights_E_mb'] + s['averaging_Z_mb']:.0f} MB: "
            "CRFsuite keeps only the (attribute, label) pairs it saw) and the library with its loaded kernels "
            f"({s['rss_before_mb'] - d['peak_rss_mb']:.0f} MB)")
    if entries:   # the layout measured stores M as per-token (tag, value) entries
        lines += [f"M is stored as per-token (tag, value) entries ({M:.1f} MB of values, "
                  f"{entry_ints:.1f} MB of "
                  "tags and pointers; `_kernels/chainsparse.py`): most of the peak above CRFsuite's is " + rest
                  + f"; the next lever in the store is the transition pairs "
                  f"({s['segments_mb'].get('transition pairs (ints) + counts (floats)', 0.0):.1f} MB).", ""]
    else:
        lines += [
                  "What the target needs (an estimate, not measured): (tag, value) pairs per token instead of each "
                  "block's tag room would take the peak to about "
                  f"{sparse_peak:.0f} MB, {sparse_peak / c['peak_rss_mb']:.2f}x CRFsuite; the rest above the target is "
                  + rest + ".", ""]
    if "before" in res:   # the same command on the code before a change, with its commit
        b = res["before"]
        lines += [f"Before ({b['commit']}, the same command, the same minutes): peak RSS {b['peak_rss_mb']:.0f} MB, "
                  f"{b['peak_rss_mb'] / c['peak_rss_mb']:.2f}x CRFsuite; store live {b['store_live_mb']:.1f} MB "
                  f"(Gram matrices {b['gram_mb']:.1f}, BM {b['bm_mb']:.1f}"
                  + (f", M {b['M_mb']:.1f}; arenas allocated {b['store_allocated_mb']:.1f} MB; CPU {b['cpu_s']:.1f} s"
                     if "M_mb" in b else "") + f"). {b.get('note', '')}".rstrip(), ""]
    with open(os.path.join(out, "chain_memory.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
