"""The cost of a consistent cut: a worker's part saves its block store, and a store that is
already compact is saved without rewriting its arenas (``BlockStore._compact_as_is``) -- the
same bytes as after a compaction. No Ray here."""
import numpy as np
import pytest

import streamssvm as ss
from streamssvm._kernels.common import py_entry


def _states_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        elif k != "rng":
            assert a[k] == b[k], k


def _learn(model, n, seed, seq=False):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        if seq:
            L = int(rng.integers(2, 6))
            model.learn_one(rng.normal(size=(L, 5)), [str(v) for v in rng.integers(0, 3, L)])
        else:
            x = rng.normal(size=6)
            model.learn_one(x, int(np.argmax(x[:4])))


@pytest.mark.parametrize("make, seq", [
    (lambda **kw: ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, **kw)), False),
    (lambda **kw: ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(
        lam=0.05, averaging=False, gap_every=None, seed=0, chain_stats="dense", **kw)), True),
    (lambda **kw: ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(
        lam=0.05, averaging=False, gap_every=None, seed=0, chain_stats="sparse", **kw)), True),
])
@pytest.mark.parametrize("capacity", [None, 50])   # 50: eviction leaves holes
def test_saving_a_compact_store_skips_the_rewrite_with_the_same_bytes(make, seq, capacity):
    m = make() if capacity is None else make(capacity=capacity)
    _learn(m, 120, 0, seq)
    st = m.bound_learner.store
    a = st.state()      # compacts when it has to
    if not st.sparse:
        assert st._compact_as_is()    # the next save takes the fast path
    _learn(m, 40, 1, seq)
    m.bound_learner.refine(1)
    before = st._compact_as_is()
    b = st.state()
    st.compact()
    c = st.state()
    _states_equal(b, c)               # skipping the rewrite saved what a rewrite would have
    if capacity is None and not st.sparse:
        assert before                  # appends and steps keep a dense store compact
    assert a["n"] <= b["n"]


def test_a_store_with_holes_is_compacted_before_saving():
    m = ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, capacity=30))
    _learn(m, 100, 2)
    st = m.bound_learner.store
    assert st.evicted > 0 and not st._compact_as_is()
    st.state()
    assert st._compact_as_is()


@pytest.mark.parametrize("seq", [False, True])
def test_stat_regions_vectorized_matches_the_per_block_offsets(seq):
    """The mixing's per-round index of every block's dual statistic (BlockStore.stat_regions,
    vectorized) is the per-block layout.stat_pos / stat_size concatenation."""
    from streamssvm._kernels import layout as KL
    from streamssvm._kernels.bcfw import M_L
    m = (ss.SequenceTagger(labels=["0", "1", "2"], learner=ss.learners.BCFW(lam=0.05, averaging=False, seed=0))
         if seq else ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(lam=0.01, seed=0)))
    _learn(m, 80, 3, seq)
    st = m.bound_learner.store
    slots = st.slots().copy()[::-1]
    idx, sizes = st.stat_regions(slots)
    want = [np.arange(int(py_entry(KL.stat_pos)(st.meta, j)), int(py_entry(KL.stat_pos)(st.meta, j))
                      + st.structure.stat_size(int(st.meta[j, M_L]), st.Kc)) for j in slots]
    np.testing.assert_array_equal(sizes, [len(w) for w in want])
    np.testing.assert_array_equal(idx, np.concatenate(want))
    assert st.stat_regions(slots[:0])[0].size == 0


# ----------------------------------------------------------------------------- asynchronous cuts
def _plain_job(tmp_path, n=240, K=2, replay=1):
    """Plain Python workers and mixer (no Ray) on in-memory examples."""
    from streamssvm.distributed._mixer import Mixer
    from streamssvm.distributed._worker import Worker
    rng = np.random.default_rng(4)
    X = [rng.normal(size=6) for _ in range(n)]
    Y = [int(np.argmax(x[:4])) for x in X]
    model = ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0, replay=replay))
    mixer = Mixer(K, "bcfw", 0.01, float(K), tmp_path / "ck")
    workers = [Worker(k, K, model.clone(), "multiclass", {"kind": "arrays", "X": X, "Y": Y}, "bcfw", 0.01, float(K))
               for k in range(K)]
    return mixer, workers


def _round(mixer, workers, r, n=40):
    outs = [w.learn_round(n) for w in workers]
    n_global = sum(i["n_blocks"] for i, _ in outs)
    mixed = mixer.mix(r, [i["n_blocks"] for i, _ in outs], *[d for _, d in outs])
    for w in workers:
        w.apply(mixed, n_global)
    return [i for i, _ in outs]


def test_an_asynchronous_part_holds_the_state_of_its_round_not_of_the_next(tmp_path):
    """``Worker.start_part`` snapshots the state at the end of round r; the part written in the
    background while round r + 1 learns (in place: the dual blocks, the weights) holds round r's
    state, byte for byte the part a synchronous cut of round r writes."""
    from streamssvm.checkpoint import load_state
    from streamssvm.distributed._cut import PART_KIND
    mixer, workers = _plain_job(tmp_path)
    _round(mixer, workers, 1)
    w = workers[0]
    sync = w.save_part(1, tmp_path / "sync.ssvm")
    ref, _ = load_state(sync["path"], kind=PART_KIND)
    snap = w.start_part(1, mixer.part_path(1, 0))
    assert snap["snapshot"] >= 0.0
    infos = _round(mixer, workers, 2)   # learns in place while (or after) the part is written
    got = infos[0]["part"]
    assert got is not None and got["round"] == 1 and got["sha256"] and set(got["timings"]) >= {
        "snapshot", "encode", "write", "fsync", "sha256", "cpu"}
    st, _ = load_state(got["path"], kind=PART_KIND)
    assert st["worker"]["examples_seen"] == 40 and w.examples_seen == 80
    _states_equal(st["model"]["learner"]["store"], ref["model"]["learner"]["store"])
    for k in ("E", "T", "B"):
        np.testing.assert_array_equal(st["model"]["learner"][k], ref["model"]["learner"][k])
    assert not np.array_equal(st["model"]["learner"]["E"], w.model.bound_learner.W.E)
    assert infos[1]["part"] is None     # worker 1 had no part in flight


def test_an_asynchronous_cut_commits_in_the_background_and_a_lost_one_leaves_the_previous(tmp_path):
    """The mixer stages the cut of round r (its state of round r), commits it in a thread once the
    parts are written (during round r + 1); a cut whose parts were never all written is never
    committed: the newest cut stays the previous one, and a torn part file is ignored."""
    from streamssvm.distributed._cut import CutStore
    mixer, workers = _plain_job(tmp_path)
    _round(mixer, workers, 1)
    parts = [w.save_part(1, mixer.part_path(1, w.index)) for w in workers]
    mixer.commit(1, parts, {"round": 1})
    _round(mixer, workers, 2)
    U2 = {k: v.copy() for k, v in mixer.weights().items()}
    for w in workers:
        w.start_part(2, mixer.part_path(2, w.index))
    mixer.stage(2, {"round": 2})
    infos = _round(mixer, workers, 3)     # parts of round 2 written meanwhile
    mixer.commit_staged(2, [i["part"] for i in infos])
    got = mixer.wait_commit()
    assert got["round"] == 2 and got["seconds"] >= 0.0
    st, _ = CutStore(tmp_path / "ck").latest()
    assert st["round"] == 2 and st["mixer"]["round"] == 2
    for k, v in U2.items():   # the mixer's state of round 2, not of round 3
        np.testing.assert_array_equal(st["mixer"]["start"][k], v)
    # round 3's cut: one worker writes its part, the other "dies" before writing it, leaving a
    # torn temporary file; nothing commits it
    workers[0].start_part(3, mixer.part_path(3, 0))
    workers[0].finish_part()
    torn = tmp_path / "ck" / "parts" / "round-00000003" / ".worker-0001.ssvm.x.tmp"
    torn.write_bytes(b"PK\x03\x04 torn")
    mixer.stage(3, {"round": 3})
    again = CutStore(tmp_path / "ck").latest()[0]
    assert again["round"] == 2
    # the offsets committed follow the cut's snapshot, not the worker's current position
    committed = []
    workers[0].source.commit = committed.append
    workers[0].commit_offsets(2)
    assert committed == [{"record": 160}] and workers[0].position == {"record": 240}


# ----------------------------------------------------------------------------- incremental cuts
def test_incremental_parts_load_as_the_whole_part_and_write_only_changed_chunks(tmp_path):
    """A worker's parts over 6 rounds (the stream, then local passes): each incremental part,
    loaded (``load_part``: its own pack plus the older parts it names), equals the whole part of
    the same state; in the stream the part holds the new blocks' chunks, not the held ones; every
    ``full_every``-th part is whole; the cut names the parts it depends on and is skipped once one
    of them is missing."""
    from streamssvm.checkpoint import load_state
    from streamssvm.distributed._cut import CHUNKS_KEY, CutStore, PART_KIND, PartChunker, load_part
    mixer, workers = _plain_job(tmp_path, n=1200, replay=0)
    for w in workers:
        w.chunker = PartChunker(chunk_bytes=1 << 10, min_bytes=1 << 12, full_every=4)
    sizes, whole_sizes = [], []
    for r in range(1, 7):
        _round(mixer, workers, r, n=120 if r <= 4 else 0)
        if r > 4:
            for w in workers:
                w.model.bound_learner.refine(0.5)
        parts = []
        for w in workers:
            parts.append(w.save_part(r, mixer.part_path(r, w.index)))
        mixer.commit(r, parts, {"round": r})
        w = workers[0]
        chunker, w.chunker = w.chunker, None
        whole = w.save_part(r, tmp_path / "whole" / f"round-{r}.ssvm")
        w.chunker = chunker
        a, _ = load_part(parts[0]["path"], kind=PART_KIND)
        b, _ = load_state(whole["path"], kind=PART_KIND)
        _states_equal(a["model"]["learner"]["store"], b["model"]["learner"]["store"])
        for k in ("E", "T", "B"):
            np.testing.assert_array_equal(a["model"]["learner"][k], b["model"]["learner"][k])
        assert a["worker"]["examples_seen"] == b["worker"]["examples_seen"]
        raw, _ = load_state(parts[0]["path"], kind=PART_KIND)
        assert any(CHUNKS_KEY in v for v in raw["model"]["learner"]["store"].values() if isinstance(v, dict))
        sizes.append(parts[0]["bytes"])
        whole_sizes.append(whole["bytes"])
        assert [d["round"] for d in parts[0]["deps"]] == sorted({d["round"] for d in parts[0]["deps"]})
        if r in (1, 5):   # whole: the first part and every 4th
            assert parts[0]["deps"] == []
    # the stream's incremental parts hold about the new blocks only (a quarter of the store at
    # round 4), the whole parts everything
    assert sizes[3] < 0.5 * whole_sizes[3] and sizes[1] < 0.8 * whole_sizes[1]
    st, _ = CutStore(tmp_path / "ck").latest()
    assert st["round"] == 6 and all(p["deps"] for p in st["parts"])   # round 6 refers to round 5
    # a worker restored from the incremental part continues as the one that wrote it
    from streamssvm.distributed._worker import Worker
    fresh = Worker(0, 2, None, "multiclass", {"kind": "arrays", "X": [], "Y": []}, "bcfw", 0.01, 2.0)
    fresh.restore(st["parts"][0]["path"])
    np.testing.assert_array_equal(fresh.model.bound_learner.W.E, workers[0].model.bound_learner.W.E)
    assert fresh.model.n_blocks == workers[0].model.n_blocks
    # a missing older part invalidates the cut that needs it
    import os
    os.unlink(st["parts"][0]["deps"][0]["path"])
    with pytest.warns(RuntimeWarning, match="missing or corrupt"):
        got = CutStore(tmp_path / "ck").latest()
    assert got is None or got[0]["round"] < 5


def test_parts_patch_the_few_changed_words_of_spread_changes_and_load_them_exactly(tmp_path):
    """Weight-sum-like changes (a few entries in half the rows: one per 4 KiB chunk or so) are
    written as patches -- the changed 8-byte words on top of the previous part's array -- in a
    fraction of the bytes of their chunks; chains of patches load bit for bit, also after the
    array went back to chunks (a dense change) and across a whole part; a missing older part
    fails the load."""
    from streamssvm.checkpoint import save_state
    from streamssvm.distributed._cut import CHUNKS_KEY, PATCH_KEY, PART_KIND, PartChunker, file_sha256, load_part
    rng = np.random.default_rng(0)
    E = rng.normal(size=(400, 64)) * (rng.random((400, 64)) < 0.05)
    arena = np.arange(40_000, dtype=np.int64)
    ch = PartChunker(full_every=5)
    parts_dir = tmp_path / "parts"
    kinds, sizes = [], []
    for r in range(1, 9):
        E = E.copy()
        if r == 4:   # a dense change: chunks again
            E += 1.0
        else:
            rows = rng.choice(400, size=200, replace=False)
            E[rows, rng.integers(0, 64, size=200)] += rng.normal(size=200)
        E[0, 0] = -0.0 if r == 6 else E[0, 0]   # a sign bit alone is a change
        arena = arena.copy()
        arena[r * 2000:r * 2000 + 2000] += 1  # a contiguous change: chunks
        rel = f"round-{r:08d}/worker-0000.ssvm"
        st = ch.split({"model": {"E": E, "arena": arena}, "n": r}, r, rel)
        p = save_state(parts_dir / rel, st, kind=PART_KIND)
        ch.written(r, p, file_sha256(p))
        kinds.append((next(iter(st["model"]["E"])), next(iter(st["model"]["arena"]))))
        e = st["model"]["E"]
        sizes.append(16 * int(e[PATCH_KEY]["patch"][2]) if PATCH_KEY in e else None)   # bytes of E's patch
        got, _ = load_part(p, kind=PART_KIND)
        assert got["n"] == r
        assert np.array_equal(got["model"]["E"].view(np.uint64), E.view(np.uint64))
        np.testing.assert_array_equal(got["model"]["arena"], arena)
    assert kinds[0] == (CHUNKS_KEY, CHUNKS_KEY)        # whole
    assert kinds[1][0] == PATCH_KEY and kinds[2][0] == PATCH_KEY and kinds[3][0] == CHUNKS_KEY
    assert kinds[4][0] == PATCH_KEY                    # patches on the chunks of round 4
    assert kinds[5][0] == CHUNKS_KEY                   # the 5th part after a whole one: whole
    assert all(k[1] == CHUNKS_KEY for k in kinds)
    assert sizes[1] < 0.1 * E.nbytes and sizes[2] < 0.1 * E.nbytes   # 200 words: 3.2 KB of 200 KB
    # the patch of round 3 needs the packs of rounds 1 and 2
    import os
    os.unlink(parts_dir / "round-00000002" / "worker-0000.ssvm")
    with pytest.raises(Exception):
        load_part(parts_dir / "round-00000003" / "worker-0000.ssvm", kind=PART_KIND)


def test_the_mixer_state_is_an_incremental_part_of_the_cut(tmp_path):
    """With incremental cuts the cut names the mixer's own part (the mixed weights and the
    average as patches on the previous round's), which ``latest`` verifies and reads back bit for
    bit -- the mixer restored from it holds the same weights and average; a missing older mixer
    part invalidates the cuts that need it (the job restarts from an older cut); without
    incremental cuts the mixer's state stays inside the cut, whole."""
    from streamssvm.distributed._cut import CutStore
    from streamssvm.distributed._mixer import Mixer
    from streamssvm.distributed._worker import Worker
    rng = np.random.default_rng(4)
    X = [rng.normal(size=2000) * (rng.random(2000) < 0.003) for _ in range(400)]   # few features a round
    Y = [int(np.argmax(x[:4])) for x in X]
    model = ss.MulticlassSSVM(labels=[0, 1, 2, 3], scale=False, learner=ss.learners.BCFW(
        lam=0.01, averaging=False, gap_every=None, seed=0))
    mixer = Mixer(2, "bcfw", 0.01, 2.0, tmp_path / "ck", keep=10, line_search=True, averaging=True)
    workers = [Worker(k, 2, model.clone(), "multiclass", {"kind": "arrays", "X": X, "Y": Y}, "bcfw", 0.01, 2.0,
                      line_search=True) for k in range(2)]
    mixer.cuts.chunker.min_bytes, mixer.cuts.chunker.chunk_bytes = 256, 64   # small weights, chunked as large ones
    states = {}
    for r in range(1, 5):
        outs = [w.learn_round(10) for w in workers]
        infos = [i for i, _ in outs]
        mixed = mixer.mix(r, [i["n_blocks"] for i in infos], *[d for _, d in outs],
                          loss_deltas=[i["loss_delta"] for i in infos],
                          totals=[{k: i.get(k) for k in ("steps", "loss_start", "evicted", "removed", "removed_loss")}
                                  for i in infos])
        for w in workers:
            w.apply(mixed, sum(i["n_blocks"] for i in infos))
        parts = [w.save_part(r, mixer.part_path(r, w.index)) for w in workers]
        mixer.commit(r, parts, {"round": r})
        states[r] = mixer.state()
        st, path = CutStore(tmp_path / "ck").latest()
        raw, _ = mixer.cuts.cuts.load(path)
        assert "mixer" not in raw and raw["mixer_part"]["path"].endswith(f"round-{r:08d}/mixer.ssvm")
        assert [d["round"] for d in raw["mixer_part"]["deps"]] == list(range(1, r))
        for k, v in states[r]["start"].items():
            assert np.array_equal(st["mixer"]["start"][k].view(np.uint64), v.view(np.uint64))
        for k, v in states[r]["average"]["U"].items():
            assert np.array_equal(st["mixer"]["average"]["U"][k].view(np.uint64), v.view(np.uint64))
        assert st["mixer"]["history"] == states[r]["history"]
    again = Mixer(2, "bcfw", 0.01, 2.0, tmp_path / "ck", line_search=True, averaging=True)
    assert again.restore()["round"] == 4
    assert all(np.array_equal(again.start[k], v) for k, v in states[4]["start"].items())
    # the mixer part of round 2 is gone: the cuts of rounds 2..4 need it, round 1's is whole
    import os
    os.unlink(tmp_path / "ck" / "parts" / "round-00000002" / "mixer.ssvm")
    with pytest.warns(RuntimeWarning, match="missing or corrupt"):
        st, _ = CutStore(tmp_path / "ck").latest()
    assert st["round"] == 1
    assert all(np.array_equal(st["mixer"]["start"][k], v) for k, v in states[1]["start"].items())
    # not incremental: inside the cut
    plain = Mixer(1, "bcfw", 0.01, 1.0, tmp_path / "plain", incremental_cuts=False)
    plain.commit(1, [], {"round": 1})
    raw, _ = plain.cuts.cuts.load(plain.cuts.cuts.list()[-1])
    assert "mixer" in raw and "mixer_part" not in raw


def test_an_unchanged_array_after_a_patch_is_not_written_again(tmp_path):
    """Before: an array unchanged since a part that patched it was written whole (no chunk of the
    previous part held it, and an empty patch was not taken): the last cut of a Brown job wrote
    the 61 MiB weights again."""
    from streamssvm.checkpoint import save_state
    from streamssvm.distributed._cut import PATCH_KEY, PART_KIND, PartChunker, file_sha256, load_part
    E = np.zeros((300, 64))
    ch = PartChunker()
    for r in range(1, 4):
        if r == 2:
            E = E.copy()
            E[::3, 5] = 1.0   # a patch
        rel = f"round-{r:08d}/worker-0000.ssvm"
        st = ch.split({"E": E}, r, rel)
        p = save_state(tmp_path / "parts" / rel, st, kind=PART_KIND)
        ch.written(r, p, file_sha256(p))
        np.testing.assert_array_equal(load_part(p, kind=PART_KIND)[0]["E"], E)
    assert PATCH_KEY in st["E"] and int(st["E"][PATCH_KEY]["patch"][2]) == 0 and st["pack"].nbytes == 0
