"""Scale-out on Ray: one worker actor per shard (Kafka partition set, file shard), mixing rounds,
a global duality-gap certificate, exactly-once across the cluster through consistent cuts.

Needs the optional extra: ``pip install "streamssvm[distributed]"`` (Ray).

* Workers (:class:`~streamssvm.distributed._worker.Worker`, run as Ray actors) predict then
  learn the records of their shard and hold the dual blocks of the examples they consumed --
  disjoint blocks, the partition CoCoA-style methods assume.
* Every round (``round_examples`` per worker, or ``round_seconds``) each worker sends its weight
  change; the mixer actor forms ``start + (beta/K) sum_k delta_k`` and broadcasts it. BCFW's
  dual blocks are blended with the same weight so the mixed point stays w = A alpha with alpha
  feasible (derivation in :mod:`streamssvm.distributed._bcfw`); ``beta=K`` is CoCoA+ adding,
  ``mix_step="line"`` picks the mixing weight by exact line search on the union's dual,
  ``mix_step="adaptive"`` (the default for BCFW with two or more workers) also sets the next
  round's sigma' from the measured overlap of the workers' changes; ``cluster="inprocess"`` runs the same rounds without Ray; SGD is
  iterative parameter mixing (McDonald, Hall and Mann 2010).
* The global certificate at the mixed w is the sum of the workers' block gaps at that w.
* The single run's configuration: BCFW's averaging is kept by the mixer (the step-weighted
  average of the mixed points, in every cut; the returned model predicts with it, and so do the
  workers' progressive predictions: each record of round r + 1 is predicted with the average as
  of round r, the last one the mixer formed, see :meth:`Worker.follow_average`), a FIFO
  ``window`` is shared by the workers (an evicted block leaves the union's sums whole), gap
  sampling with ``gap_every``, lambda following n (derivations in :mod:`._bcfw`).
* Every ``checkpoint_every`` rounds (and when the stream ends) a consistent cut
  (:mod:`streamssvm.distributed._cut`): every worker's part (model, dual blocks, source offsets
  per partition; by default only the chunks changed since its previous part) is written durably,
  then the mixer commits the cut atomically, then Kafka offsets are committed
  (``async_cuts=True``: written while the next round learns). A dead worker makes the job
  restart every worker from the newest cut.

>>> import numpy as np, streamssvm as ss, streamssvm.distributed as sd   # doctest: +SKIP
>>> X = np.random.default_rng(0).normal(size=(400, 5)); Y = (X[:, 0] > 0).astype(int).tolist()  # doctest: +SKIP
>>> m = ss.MulticlassSSVM(labels=[0, 1], learner=ss.learners.BCFW(lam=0.01))  # doctest: +SKIP
>>> res = sd.run(m, (X, Y), task="multiclass", workers=2, round_examples=50)   # doctest: +SKIP
>>> res.examples_seen, res.certificate["gap"] >= 0                            # doctest: +SKIP
(400, True)
"""
from .._optional import require

require("ray", extra="distributed", feature="streamssvm.distributed")

from ._mixer import Mixer
from ._run import DistributedResult, default_passes_per_round, default_round_examples, init_cluster, run, runtime_env
from ._worker import Worker

__all__ = ["DistributedResult", "Mixer", "Worker", "default_passes_per_round", "default_round_examples",
           "init_cluster", "run", "runtime_env"]
