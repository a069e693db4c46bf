"""The structures' oracles for one example at frozen weights, as the searches of
:mod:`streamssvm.oracles.slack` call them, with honest counts of what each call costs.

* ``lam_oracle(lam)``: the lambda-oracle argmax_y h(y) + lam g(y) is loss-augmented decoding with
  the loss scaled by lam (``structops.decode(..., loss_scale=lam)``): Viterbi for chains
  (O(L K^2)), O(K) for multiclass, O(K) for independent multi-label, enumeration of the 2^K
  labelings for the pairwise multi-label MRF (so there a lambda query costs as much as the exact
  slack oracle, which is the same enumeration).
* ``constrained(lam, hi, lo, hi_closed, lo_closed)``: the constrained lambda-oracle (Choi, Meshi
  & Srebro, "Fast and Scalable Structural SVM with Slack Rescaling", eq. 12). None of these
  structures has a cheap one (a linear constraint on (h, g) breaks Viterbi); it is answered
  from the *level points* -- the best labeling at every loss level, computed once per example
  by ``structops.slack_levels`` (the O(L^2 K^2) wrong-tag DP for chains, a sort for
  multi-label, O(K) for multiclass; for the MRF one enumeration that also keeps each level's
  labeling; the level DP for hierarchies), which is exactly the work of the exact slack oracle.
  That pass is counted in ``level_passes``; the constrained queries on the points afterwards
  are counted in ``c_queries``.
* ``exact()``: the exact slack oracle; ``margin()``: loss-augmented decoding (lam = 1).

h(y) = 1 + <w, phi(x, y)> - <w, phi(x, y_i)>, g(y) = Delta(y_i, y) as in the searches.
Labels are returned as hashable keys (``bytes`` of the labeling for lambda-oracle answers,
``("level", index)`` for level points); :meth:`labeling` turns a key into the labeling array.
"""
from __future__ import annotations

import numpy as np

from .._kernels import structops as so
from .._kernels.bundles import model as _model
from ..workspace import Workspace
from .slack import constrained_argmax


class ExampleOracles:
    """Oracles of one example at weights ``scale * (E, T, B)``.

    Parameters
    ----------
    structure, K, Kc, C
        The structure (:mod:`streamssvm.structures`), labels in use, label capacity, cost matrix
        (Kc x Kc).

    Examples
    --------
    >>> import numpy as np
    >>> from streamssvm.structures import MultiClass
    >>> from streamssvm.oracles.structured import ExampleOracles
    >>> from streamssvm.oracles.slack import bisecting_search
    >>> E = np.array([[0.0, 1.0, -1.0]]); T = np.zeros((3, 3)); B = np.zeros((2, 3))
    >>> C = 1.0 - np.eye(3)
    >>> o = ExampleOracles(MultiClass(), 3, 3, C)
    >>> o.prepare(E, T, B, 1.0, np.array([0, 1], dtype=np.int32), np.array([0], dtype=np.int32),
    ...           np.array([1.0]), np.array([0], dtype=np.int32), 1)
    >>> r = bisecting_search(o.lam_oracle, lam0=1.0, max_queries=10)
    >>> int(o.labeling(r.label)[0]), r.phi      # class 1: 1 * (1 + 1 - 0)
    (1, 2.0)
    >>> o.exact()[1]
    2.0
    """

    def __init__(self, structure, K, Kc, C):
        self.structure = structure
        self.kind, self.K, self.Kc, self.use_trans, self.C = (int(structure.kind), int(K), int(Kc),
                                                              bool(structure.use_trans), C)
        self.lam_queries = 0
        self.c_queries = 0
        self.level_passes = 0
        self.exact_calls = 0
        self.model = _model(structure, self.K, self.Kc, C)
        self.ws = Workspace(structure).ensure(1, self.Kc)

    # ------------------------------------------------------------------ setup
    def prepare(self, E, T, B, scale, tok_ptr, fidx, fval, ytrue, Ki=1):
        """Bind the oracles to one example at weights ``scale * (E, T, B)``."""
        L = len(tok_ptr) - 1
        ws = self.ws.ensure(L, self.Kc)
        self.S, self._V, self._bp, self._ybuf, self._dbuf, self._hs, self._gs = (
            ws.S, ws.V, ws.bp, ws.ybuf, ws.dbuf, ws.hs, ws.gs)
        self.L, self.T, self.B, self.scale = L, T, B, float(scale)
        self.w = (E, T, B)
        self.ytrue = np.asarray(ytrue, dtype=np.int32)
        self.Ki = int(Ki)
        so.emission_scores(E, self.scale, tok_ptr, fidx, fval, L, self.K, self.S)
        self.n_lab = self.structure.labeling_len(L, self.Kc)
        self.truth_lab = self.structure.truth_labeling(self.ytrue, self.K, self.Kc)
        self.ts = so.labeling_score(self.kind, self.S, T, B, self.scale, self.truth_lab, L, self.K, self.use_trans)
        self._labs = {}
        self._levels = None

    def hg(self, lab):
        """(h, g) of a labeling."""
        sc = so.labeling_score(self.kind, self.S, self.T, self.B, self.scale, lab, self.L, self.K, self.use_trans)
        g = so.labeling_loss(self.kind, lab, self.ytrue, len(self.ytrue), self.C, self.L, self.K, self.Ki, self._ybuf)
        return 1.0 + sc - self.ts, g

    def g_min(self):
        """Smallest positive loss a labeling can have."""
        return self.structure.loss_range(self.ytrue, self.L, self.K, self.Ki, self.C)[0]

    def g_max(self):
        """Largest loss of a labeling (Hamming: all wrong)."""
        return self.structure.loss_range(self.ytrue, self.L, self.K, self.Ki, self.C)[1]

    # ------------------------------------------------------------------ oracles
    def _decode(self, lam):
        lab = np.zeros(max(self.n_lab, 1), dtype=np.int32)
        so.decode(self.model, self.w, self.S, self.scale, self.L, self.ytrue, len(self.ytrue), float(lam),
                  max(self.Ki, 1), self.ws.scratch(self.L, False), lab)
        return lab

    def lam_oracle(self, lam):
        """argmax_y h(y) + lam g(y) by loss-augmented decoding; returns (key, h, g)."""
        self.lam_queries += 1
        lab = self._decode(lam)
        key = lab.tobytes()
        self._labs[key] = lab
        h, g = self.hg(lab)
        return key, h, g

    def map_h(self):
        """One lambda = 0 query (MAP): (key, h, g); its h is H-hat = max_y h(y)."""
        return self.lam_oracle(0.0)

    def levels(self):
        """The level points (h, g) (one pass, counted in ``level_passes``)."""
        if self._levels is None:
            pts = self.structure.level_points(self)
            if pts is not None:
                self.level_passes += 1
                self._levels = pts
        if self._levels is None:
            self.level_passes += 1
            n = so.slack_levels(self.model, self.w, self.S, self.scale, self.L, self.ytrue, len(self.ytrue),
                                max(self.Ki, 1), self.ws.scratch(self.L, True), self._hs, self._gs)
            self._levels = (self._hs[:n].copy(), self._gs[:n].copy())
        return self._levels

    def constrained(self, lam, hi, lo, hi_closed, lo_closed):
        """Constrained lambda-oracle answered on the level points: (key, h, g) or None."""
        self.c_queries += 1
        hs, gs = self.levels()
        r = constrained_argmax(zip(hs, gs), lam, hi, lo, hi_closed, lo_closed)
        return None if r is None else (("level", r[0]), r[1], r[2])

    def labeling(self, key):
        """The labeling array of a key returned by an oracle (None: the ground truth)."""
        if key is None:
            return self.truth_lab.copy()
        if isinstance(key, tuple):
            return self._level_labeling(key[1])
        return self._labs[key]

    def _level_labeling(self, i):
        hs, gs = self.levels()
        g_sel = gs[i]
        lab = np.zeros(max(self.n_lab, 1), dtype=np.int32)
        self.structure.level_labeling(self, i, g_sel, lab)
        return lab

    def slack_dp(self):
        """The slack DP table of this example (allocated on first use, by this example's L)."""
        return self.ws.slack_dp(self.L)

    def exact(self):
        """Exact slack oracle: (labeling, max_y h(y) g(y) (>= 0))."""
        self.exact_calls += 1
        lab = np.zeros(max(self.n_lab, 1), dtype=np.int32)
        v = so.slack_oracle(self.model, self.w, self.S, self.scale, self.L, self.ytrue, len(self.ytrue),
                            max(self.Ki, 1), self.ws.scratch(self.L, True), lab)
        return lab, float(v)

    def margin(self):
        """Loss-augmented decoding (lam = 1): (labeling, max_y Delta(y) - <w, psi(y)> (>= 0))."""
        self.exact_calls += 1
        lab = self._decode(1.0)
        h, g = self.hg(lab)
        return lab, max(h - 1.0 + g, 0.0)
