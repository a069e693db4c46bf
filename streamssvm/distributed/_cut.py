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
"""
from __future__ import annotations

import hashlib
import shutil
import warnings
from pathlib import Path

from ..checkpoint import CheckpointManager
from ..errors import CheckpointError

CUT_KIND = "streamssvm.distributed.cut"
PART_KIND = "streamssvm.distributed.part"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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

    def __init__(self, directory, keep=3):
        self.directory = Path(directory)
        self.cuts = CheckpointManager(self.directory / "cuts", keep=keep)
        self.parts_dir = self.directory / "parts"

    def part_path(self, round_id, worker):
        return self.parts_dir / f"round-{int(round_id):08d}" / f"worker-{int(worker):04d}.ssvm"

    def commit(self, round_id, parts, mixer_state, meta=None):
        """Verify every part and commit the cut of ``round_id`` atomically; returns its path."""
        for p in parts:
            path = Path(p["path"])
            if not path.exists():
                raise CheckpointError(f"round {round_id}: the part of worker {p['worker']} is missing ({path})")
            if file_sha256(path) != p["sha256"]:
                raise CheckpointError(f"round {round_id}: the part of worker {p['worker']} does not match its checksum")
        state = {"round": int(round_id), "parts": [dict(p) for p in parts], "mixer": mixer_state}
        out = self.cuts.save(state, kind=CUT_KIND, meta=dict(meta or {}, round=int(round_id)))
        self._clean()
        return out

    def _clean(self):
        """Drop the part directories that no kept cut names any more."""
        keep = set()
        for c in self.cuts.list():
            try:
                st, _ = self.cuts.load(c)
            except CheckpointError:
                continue
            keep |= {Path(p["path"]).parent.name for p in st["parts"]}
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
                for p in st["parts"]:
                    pp = Path(p["path"])
                    if not pp.exists() or file_sha256(pp) != p["sha256"]:
                        raise CheckpointError(f"{path}: the part of worker {p['worker']} is missing or corrupt")
                return st, path
            except CheckpointError as e:
                warnings.warn(f"skipping cut: {e}", RuntimeWarning, stacklevel=2)
        return None
