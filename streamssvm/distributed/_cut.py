"""Consistent checkpoint cuts: one per mixing round, committed by the mixer after every worker's
part is durable (no Ray here).

Layout under the job's checkpoint directory::

    parts/round-00000012/worker-0000.ssvm   one file per worker (save_state: atomic, checksummed)
    cuts/ckpt-000000NN/                     CheckpointManager: the cut = round id, each part's
                                            path and SHA-256, the mixer's state (mixed weights,
                                            global n, history)

A cut exists only once its directory has been renamed into place, which happens after every
part file it names was fsynced and verified: restarting from the newest cut whose parts all
verify gives every worker the state (model, dual blocks, source offsets per partition) of the
same round. Kafka offsets are committed only after the cut is committed.

Asynchronous cuts (``run(async_cuts=True)``; synchronous by default): at the end of round r each worker
snapshots its part (every array copied) and a thread of the worker writes it while round r + 1
learns; the mixer snapshots its own state of round r (``Mixer.stage``). After round r + 1 has
learned, the workers report the written parts and the mixer commits the cut of round r in a
thread of its own (``Mixer.commit_staged``) while round r + 2 learns; after that round the
workers commit the Kafka offsets of round r together with the mixed weights (``Worker.apply``
waits for the mixer's report of the commit). The invariant is the
synchronous one -- a cut exists only once every part it names is durable and verified, offsets
follow the cut -- so a failure while a cut is in flight restarts from the previous cut and the
rounds since are learned again, each message once. The last cut of a job is synchronous.

Incremental parts (``run(incremental_cuts=True)``, the default; :class:`PartChunker`): a part
holds only the chunks of its large arrays that changed since the worker's previous part and
names the older parts holding the others (``deps`` of the cut's part entry, verified by
:meth:`CutStore.latest`, kept by :meth:`CutStore._clean` while a kept cut needs them). The
mixer's state (the mixed weights and their average) is written the same way, as a part of its
own (``parts/round-N/mixer.ssvm``, the cut's ``mixer_part``), so a cut of a round that moved
0.7% of the weights' entries writes about those, not the whole weights twice.
"""
from __future__ import annotations

import hashlib
import shutil
import warnings
from pathlib import Path

import numpy as np

from ..checkpoint import CheckpointManager, load_state, save_state
from ..errors import CheckpointError

CUT_KIND = "streamssvm.distributed.cut"
PART_KIND = "streamssvm.distributed.part"
#: the key of an array stored as chunks of this and earlier parts (an incremental part)
CHUNKS_KEY = "streamssvm.chunks"
#: the key of an array stored as the previous part's array and the 8-byte words that changed
PATCH_KEY = "streamssvm.patch"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def part_path(directory, round_id, worker):
    """Where worker ``worker`` writes its part of the cut of ``round_id`` in a job's directory."""
    return Path(directory) / "parts" / f"round-{int(round_id):08d}" / f"worker-{int(worker):04d}.ssvm"


class PartChunker:
    """Incremental parts: a worker's large arrays (the block store's arenas, the weights) cut in
    chunks of ``chunk_bytes``; a part stores only the chunks whose bytes changed since the
    worker's previous part, and refers to the older parts holding the others.

    An incremental part is an ordinary part file (``save_state``) whose state has, besides
    ``model`` and ``worker``, a ``pack`` (uint8: this part's new chunks, back to back), its round
    ``pack_round`` and ``packs`` (round -> the part file, relative to the ``parts`` directory, of
    every older pack it refers to); each chunked array is ``{CHUNKS_KEY: {"dtype", "shape",
    "chunks"}}`` with one row ``(round, offset, nbytes)`` per chunk. :func:`load_part` puts the
    arrays back together. A cut lists, for every part, the older parts it depends on with their
    SHA-256 (``deps``): the cut is valid only when all of them verify, and they are kept as long
    as a kept cut needs them. Every ``full_every``-th part (and the first after a restart) is
    whole, which bounds the chain and the space old packs hold.

    Comparing with the previous part's arrays (kept in memory, the snapshot's own copies) costs
    one pass over the bytes, no hashing; the file written holds the changed chunks only -- or,
    when fewer bytes, the changed 8-byte words alone (a *patch*: their positions and values on
    top of the previous part's array, ``{PATCH_KEY: {"dtype", "shape", "base", "patch"}}`` with
    ``base`` that array's previous description and ``patch`` = ``(round, offset, count)``). A
    round's change of the weight sums touches few entries spread over half the rows (Brown, 472
    tags: 0.7% of the entries, one per 4 KiB chunk or so): a patch holds them in 1/20 of the bytes
    of the chunks. Patches chain back to the last whole part at most.
    """

    def __init__(self, chunk_bytes=1 << 12, min_bytes=1 << 14, full_every=8):
        self.chunk_bytes, self.min_bytes, self.full_every = int(chunk_bytes), int(min_bytes), int(full_every)
        self.reset()

    def reset(self):
        """Forget the previous part (the next part is whole)."""
        self.prev = {}      # tree path -> (uint8 bytes of the array, its description, pack rounds it uses)
        self.packs = {}     # round -> {"file": path relative to parts/, "path", "sha256"} of packs in use
        self.since_full = None

    def split(self, state, round_id, rel):
        """``state`` with its large arrays chunked against the previous part; ``rel`` is this
        part's file relative to the ``parts`` directory. Returns the state to save."""
        r = int(round_id)
        whole = self.since_full is None or self.since_full + 1 >= self.full_every
        prev = {} if whole else self.prev
        new_prev, pack, used = {}, [], set()
        offset = [0]

        def walk(v, path):
            if isinstance(v, dict):
                return {k: walk(u, f"{path}/{k}") for k, u in v.items()}
            if isinstance(v, list):
                return [walk(u, f"{path}[{i}]") for i, u in enumerate(v)]
            if not (isinstance(v, np.ndarray) and v.nbytes >= self.min_bytes and v.dtype.kind in "biuf"):
                return v
            b = np.ascontiguousarray(v).reshape(-1).view(np.uint8)
            C = self.chunk_bytes
            m = -(-b.size // C)
            rows = np.empty((m, 3), dtype=np.int64)
            same = np.zeros(m, dtype=bool)
            old = prev.get(path)
            if old is not None and old[0].size == b.size and b.size % 8 == 0 and C % 8 == 0:
                # the changed 8-byte words: as a patch on the previous array, or their chunks
                pos = np.flatnonzero(b.view(np.uint64) != old[0].view(np.uint64))
                changed = np.unique(pos // (C // 8))
                chunk_bytes = C * changed.size - (C * m - b.size if changed.size and changed[-1] == m - 1 else 0)
                # (after a patch no chunk of the previous part holds the array's bytes: the
                # alternative to a patch is then the whole array)
                if 16 * pos.size < (chunk_bytes if CHUNKS_KEY in old[1] else b.size):
                    words = b.view(np.uint64)[pos]
                    pack.append(pos.astype(np.int64).view(np.uint8))
                    pack.append(words.view(np.uint8))
                    desc = {PATCH_KEY: {"dtype": str(v.dtype), "shape": list(v.shape), "base": old[1],
                                        "patch": np.array([r, offset[0], pos.size], dtype=np.int64)}}
                    offset[0] += 16 * pos.size
                    rounds = old[2] | {r}
                    used.update(rounds)
                    new_prev[path] = (b, desc, rounds)
                    return desc
                if isinstance(old[1], dict) and CHUNKS_KEY in old[1]:
                    same[:] = True
                    same[changed] = False
                    prow = old[1][CHUNKS_KEY]["chunks"]
                    rows[same] = prow[same]
            elif old is not None and old[0].size > 0 and CHUNKS_KEY in old[1]:
                pb, prow = old[0], old[1][CHUNKS_KEY]["chunks"]
                k = min(b.size, pb.size) // C   # whole chunks present in both
                if k:
                    w = C // 8 if C % 8 == 0 else None
                    x, y = b[:k * C], pb[:k * C]
                    if w is not None:
                        x, y = x.view(np.uint64), y.view(np.uint64)
                    same[:k] = ~np.any((x != y).reshape(k, -1), axis=1)
                    same[:k] &= prow[:k, 2] == C
                    rows[:k][same[:k]] = prow[:k][same[:k]]
            new = np.flatnonzero(~same)
            if new.size:
                full = new[(new + 1) * C <= b.size]   # whole chunks: one gather
                starts = offset[0] + C * np.arange(full.size, dtype=np.int64)
                rows[full] = np.stack([np.full(full.size, r), starts, np.full(full.size, C)], axis=1)
                pack.append(b[:(b.size // C) * C].reshape(-1, C)[full].reshape(-1))
                offset[0] += C * full.size
                if new[-1] * C + C > b.size:          # the last, partial chunk
                    tail = b[new[-1] * C:]
                    rows[new[-1]] = (r, offset[0], tail.size)
                    pack.append(tail)
                    offset[0] += tail.size
            rounds = {int(x) for x in np.unique(rows[:, 0])}
            used.update(rounds)
            desc = {CHUNKS_KEY: {"dtype": str(v.dtype), "shape": list(v.shape), "chunks": rows}}
            new_prev[path] = (b, desc, rounds)
            return desc

        out = walk(state, "")
        used.discard(r)
        out["pack"] = np.concatenate(pack) if pack else np.zeros(0, dtype=np.uint8)
        out["pack_round"] = r
        out["packs"] = {str(q): self.packs[q]["file"] for q in sorted(used)}
        self.prev = new_prev
        self.since_full = 0 if whole else self.since_full + 1
        self.packs = {q: self.packs[q] for q in used}
        self.packs[r] = {"file": rel, "path": None, "sha256": None}
        return out

    def written(self, round_id, path, sha256):
        """The part of ``round_id`` is durable at ``path``: returns the older parts it depends
        on, ``[{"round", "path", "sha256"}]``."""
        self.packs[int(round_id)].update(path=str(path), sha256=sha256)
        return [{"round": q, "path": v["path"], "sha256": v["sha256"]}
                for q, v in sorted(self.packs.items()) if q != int(round_id)]


def load_part(path, kind=PART_KIND):
    """A part's state (whole or incremental: its chunked arrays put back together from its own
    pack and the older parts it names)."""
    path = Path(path)
    st, meta = load_state(path, kind=kind)
    if "pack" not in st:
        return st, meta
    own = int(st.pop("pack_round"))
    packs = {own: np.asarray(st.pop("pack"), dtype=np.uint8)}
    for q, rel in st.pop("packs").items():
        other = path.parent.parent / rel
        packs[int(q)] = np.asarray(load_state(other, kind=kind)[0]["pack"], dtype=np.uint8)

    def walk(v):
        if isinstance(v, dict):
            if PATCH_KEY in v and len(v) == 1:
                c = v[PATCH_KEY]
                q, o, n = (int(x) for x in np.asarray(c["patch"], dtype=np.int64).reshape(3))
                a = walk(c["base"])   # (a copy of its own)
                try:
                    raw = packs[q][o:o + 16 * n]
                    words = a.reshape(-1).view(np.uint64)
                    words[raw[:8 * n].view(np.int64)] = raw[8 * n:].view(np.uint64)
                except (KeyError, ValueError, IndexError) as e:
                    raise CheckpointError(f"{path}: a patched array does not fit its packs ({e})") from None
                if str(a.dtype) != c["dtype"] or list(a.shape) != list(c["shape"]):
                    raise CheckpointError(f"{path}: a patched array does not fit its base")
                return a
            if CHUNKS_KEY in v and len(v) == 1:
                c = v[CHUNKS_KEY]
                rows = np.asarray(c["chunks"], dtype=np.int64).reshape(-1, 3)
                try:
                    b = np.concatenate([packs[int(q)][o:o + n] for q, o, n in rows]) if len(rows) else \
                        np.zeros(0, dtype=np.uint8)
                    return b.view(np.dtype(c["dtype"])).reshape(c["shape"]).copy()
                except (KeyError, ValueError) as e:
                    raise CheckpointError(f"{path}: a chunked array does not fit its packs ({e})") from None
            return {k: walk(u) for k, u in v.items()}
        if isinstance(v, list):
            return [walk(u) for u in v]
        return v

    return walk(st), meta


class CutStore:
    """Parts and cuts of one distributed job.

    >>> import tempfile, numpy as np
    >>> from streamssvm.checkpoint import save_state
    >>> cs = CutStore(tempfile.mkdtemp(), keep=2)
    >>> p = save_state(cs.part_path(1, 0), {"w": np.zeros(2)}, kind=PART_KIND)
    >>> _ = cs.commit(1, [{"worker": 0, "path": str(p), "sha256": file_sha256(p)}], {"n_global": 0})
    >>> cut, path = cs.latest()
    >>> cut["round"], len(cut["parts"])
    (1, 1)
    """

    def __init__(self, directory, keep=3, incremental=True):
        self.directory = Path(directory)
        # the mixer's state as an incremental part of its own (None: inside the cut, whole)
        self.chunker = PartChunker() if incremental else None
        self.cuts = CheckpointManager(self.directory / "cuts", keep=keep)
        self.parts_dir = self.directory / "parts"
        # the part directories each kept cut names, by the cut's file name: a cut is read once
        # (whole: its mixer state holds the weights and their average), not at every commit
        self._names = {}

    def part_path(self, round_id, worker):
        return part_path(self.directory, round_id, worker)

    def commit(self, round_id, parts, mixer_state, meta=None):
        """Verify every part and commit the cut of ``round_id`` atomically; returns its path."""
        for p in parts:
            path = Path(p["path"])
            if not path.exists():
                raise CheckpointError(f"round {round_id}: the part of worker {p['worker']} is missing ({path})")
            if file_sha256(path) != p["sha256"]:
                raise CheckpointError(f"round {round_id}: the part of worker {p['worker']} does not match its checksum")
        state = {"round": int(round_id), "parts": [dict(p) for p in parts]}
        if self.chunker is None:
            state["mixer"] = mixer_state
        else:
            state["mixer_part"] = self._write_mixer_part(round_id, mixer_state)
        out = self.cuts.save(state, kind=CUT_KIND, meta=dict(meta or {}, round=int(round_id)))
        self._names[Path(out).name] = _named_dirs(state)
        self._clean()
        return out

    def _write_mixer_part(self, round_id, mixer_state):
        """The mixer's state as an incremental part (durable, then described): ``{"path",
        "sha256", "deps"}``. Its arrays are copied first: the chunker keeps them to compare the
        next state with."""
        path = self.part_path(round_id, 0).with_name("mixer.ssvm")
        rel = f"{path.parent.name}/{path.name}"
        try:
            st = self.chunker.split({"mixer": copy_arrays(mixer_state)}, int(round_id), rel)
            p = save_state(path, st, kind=PART_KIND, meta={"mixer": True, "round": int(round_id)})
            sha = file_sha256(p)
        except BaseException:
            self.chunker.reset()   # what it kept may name a part that was not written
            raise
        return {"path": str(p), "sha256": sha, "deps": self.chunker.written(round_id, p, sha)}

    def _clean(self):
        """Drop the part directories that no kept cut names any more."""
        keep = set()
        names = {}
        for c in self.cuts.list():
            got = self._names.get(Path(c).name)
            if got is None:
                try:
                    st, _ = self.cuts.load(c)
                except CheckpointError:
                    continue
                got = _named_dirs(st)
            names[Path(c).name] = got
            keep |= got
        self._names = names
        if not self.parts_dir.is_dir():
            return
        newest = max((int(n.split("-")[1]) for n in keep), default=None)
        for d in self.parts_dir.iterdir():
            if d.is_dir() and d.name not in keep and d.name.startswith("round-"):
                # a newer round's parts may be being written right now: only drop older ones
                if newest is not None and int(d.name.split("-")[1]) < newest:
                    shutil.rmtree(d, ignore_errors=True)

    def latest(self):
        """``(cut state, path)`` of the newest cut whose parts all verify, or None."""
        for path in reversed(self.cuts.list()):
            try:
                st, _ = self.cuts.load(path)
                mp = st.get("mixer_part")
                for p in st["parts"] + ([dict(mp, worker="mixer")] if mp is not None else []):
                    for d in [p, *p.get("deps", [])]:
                        pp = Path(d["path"])
                        if not pp.exists() or file_sha256(pp) != d["sha256"]:
                            raise CheckpointError(f"{path}: the part of worker {p['worker']} is missing or corrupt")
                if mp is not None:
                    st["mixer"] = load_part(mp["path"])[0]["mixer"]
                return st, path
            except CheckpointError as e:
                warnings.warn(f"skipping cut: {e}", RuntimeWarning, stacklevel=2)
        return None


def _named_dirs(cut):
    """The part directories a cut's state names (its parts, the mixer's, and their deps)."""
    mp = cut.get("mixer_part")
    return {Path(d["path"]).parent.name for p in cut["parts"] + ([mp] if mp is not None else [])
            for d in [p, *p.get("deps", [])]}


def copy_arrays(tree):
    """``tree`` with every array copied (dicts and lists rebuilt, other leaves shared)."""
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, dict):
        return {k: copy_arrays(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(copy_arrays(v) for v in tree)
    return tree
