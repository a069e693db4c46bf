"""One owner of the kernels' scratch buffers, grown by need.

The numba kernels write into preallocated work arrays (scores, Viterbi tables, back-pointers,
labelings, a statistic buffer, level points). A :class:`Workspace` holds them for one learner or
oracle set and sizes them to the largest labeling length ``L`` and label capacity ``Kc``
actually asked for:

* a larger ``L`` grows the capacity to ``max(L, 1.25 * capacity)`` (modest amortized growth);
* a new ``Kc`` (a new label) reallocates at the *same* length capacity -- never doubling per
  label, which is what made per-label growth explode before;
* the slack-rescaling DP table of chains, ``(L + 1) x Kc x (L + 1)`` floats, exists only once
  :meth:`slack_dp` is called (when a chain's slack oracle runs), sized by that call's ``L``.

The structure decides the sizes (``structure.stat_size(L, Kc)``, ``structure.slack_dp_shape(L,
Kc)``), so this module has no per-structure branch.

>>> from streamssvm.structures import Chain, MultiClass
>>> ws = Workspace(MultiClass())
>>> _ = ws.ensure(1, 4)
>>> ws.S.shape, ws.lab.shape
((8, 4), (8,))
>>> for Kc in range(5, 40):          # labels arriving one at a time: no growth in L
...     _ = ws.ensure(1, Kc)
>>> ws.L_cap, ws.S.shape
(8, (8, 39))
>>> ws.slack_dp(1).shape              # multiclass has no slack DP table
(1, 1, 1)
>>> wc = Workspace(Chain()).ensure(12, 26)
>>> wc.slack_dp(12).shape
(13, 26, 13)
>>> wc.nbytes < 1_000_000
True
"""
from __future__ import annotations

import numpy as np

from ._kernels.bundles import Scratch, pack

_GROWTH = 1.25
_MIN_L = 8


def _no_dp():
    return np.zeros((1, 1, 1))


class Workspace:
    """Scratch buffers of the kernels for one structure (see the module docstring).

    Fields (valid after :meth:`ensure`; ``Lc = L_cap``, ``Kc`` the label capacity):

    ``S`` (Lc, Kc) float
        emission scores of the current example (``S[t, k] = scale * <E[:, k], x_t>``).
    ``V`` (Lc, Kc) float, ``bp`` (Lc, Kc) int32
        Viterbi table and back-pointers.
    ``ybuf`` (Kc,) int32
        dense truth / label marks.
    ``lab`` (max(Lc, Kc),) int32
        a labeling (the oracle's answer).
    ``dbuf`` (max(stat_size(Lc, Kc), Kc) + 1,) float
        a sufficient statistic, or per-label deltas of the slack oracles.
    ``hs``, ``gs`` (max(Lc, Kc) + 1,) float
        level points (h, g) of the slack searches.
    ``V3``
        the chains' slack DP table, (L + 1, Kc, L + 1), only after :meth:`slack_dp`; a
        (1, 1, 1) placeholder otherwise.
    """

    def __init__(self, structure):
        self.structure = structure
        self.L_cap = 0
        self.Kc = 0
        self.S = self.V = np.zeros((0, 0))
        self.bp = np.zeros((0, 0), dtype=np.int32)
        self.ybuf = self.lab = np.zeros(0, dtype=np.int32)
        self.dbuf = self.hs = self.gs = np.zeros(0)
        self.V3 = _no_dp()
        self._scratch = None   # the margin-rescaling scratch bundle, until a buffer changes

    def ensure(self, L, Kc):
        """Make the buffers hold labelings of length ``L`` over ``Kc`` label slots; returns self."""
        L, Kc = max(int(L), 1), int(Kc)
        if L <= self.L_cap and Kc == self.Kc:
            return self
        Lb = self.L_cap if L <= self.L_cap else max(L, int(self.L_cap * _GROWTH), _MIN_L)
        if Kc != self.Kc:
            self.V3 = _no_dp()   # sized by Kc: rebuilt on the next slack_dp call
        self.L_cap, self.Kc = Lb, Kc
        self._scratch = None
        self.S = np.zeros((Lb, Kc))
        self.V = np.zeros((Lb, Kc))
        self.bp = np.zeros((Lb, Kc), dtype=np.int32)
        self.ybuf = np.zeros(Kc, dtype=np.int32)
        self.lab = np.zeros(max(Lb, Kc), dtype=np.int32)
        self.dbuf = np.zeros(max(int(self.structure.stat_size(Lb, Kc)), Kc) + 1)
        self.hs = np.zeros(max(Lb, Kc) + 1)
        self.gs = np.zeros(max(Lb, Kc) + 1)
        return self

    def slack_dp(self, L, needed=True):
        """The slack-rescaling DP table for labelings of length ``L`` (allocated or grown now,
        exactly to this ``L``; a placeholder for structures without one, or when ``needed`` is
        false: margin rescaling). Call after :meth:`ensure`."""
        shape = self.structure.slack_dp_shape(max(int(L), 1), self.Kc) if needed else None
        if shape is None:
            return self.V3
        V3 = self.V3
        if V3.shape[0] < shape[0] or V3.shape[1] != shape[1] or V3.shape[2] < shape[2]:
            self.V3 = np.zeros(shape)
            self._scratch = None
        return self.V3

    def scratch(self, L, slack):
        """The buffers as the kernels take them (``streamssvm._kernels.bundles.Scratch``), with
        the slack DP table for length ``L`` when ``slack`` (slack rescaling). Without ``slack``
        the bundle depends on no ``L`` and is kept until :meth:`ensure` reallocates."""
        if not slack:
            if self._scratch is None:
                self._scratch = pack(Scratch(S=self.S, V=self.V, bp=self.bp, ybuf=self.ybuf, lab=self.lab,
                                             dbuf=self.dbuf, V3=self.V3))
            return self._scratch
        return pack(Scratch(S=self.S, V=self.V, bp=self.bp, ybuf=self.ybuf, lab=self.lab, dbuf=self.dbuf,
                            V3=self.slack_dp(L, slack)))

    def scratch_for(self, L, Kc, slack):
        """``ensure(L, Kc).scratch(L, slack)`` in one call, the kept bundle first (margin
        rescaling, the buffers already that large: the record path's every call)."""
        sc = self._scratch
        if sc is not None and not slack and L <= self.L_cap and Kc == self.Kc:
            return sc
        return self.ensure(L, Kc).scratch(L, slack)

    def release(self):
        """Drop every buffer (they are rebuilt by the next :meth:`ensure`)."""
        self.__init__(self.structure)

    @property
    def nbytes(self):
        """Bytes held by the buffers."""
        return int(sum(a.nbytes for a in (self.S, self.V, self.bp, self.ybuf, self.lab, self.dbuf,
                                          self.hs, self.gs, self.V3)))
