"""River-compatible structural SVM estimators.

=================  ==============================  ==========================  =====================
class              river base                      x                           y
=================  ==============================  ==========================  =====================
MulticlassSSVM     ``base.Classifier``             dict or 1-D array           hashable label
MultiLabelSSVM     ``base.MultiLabelClassifier``   dict or 1-D array           dict[label, bool]
SequenceTagger     ``base.Estimator``              list of dicts or 2-D array  list of labels
ExtremeClassifier  ``base.Classifier``             dict or 1-D array           hashable label
GraphSegmenter     ``base.Estimator``              dict: nodes, edges          list of 0/1 per node
=================  ==============================  ==========================  =====================

All have ``learn_one``, ``predict_one``, ``learn_many`` / ``predict_many`` (numpy or pandas
batches), ``refine(passes)``, ``certificate()``, ``save(path)`` and ``load(path)``;
:func:`load` restores any of them. ``predict_nbest_one(x, k)`` / ``predict_nbest_many`` give the
k best outputs with their scores (:mod:`streamssvm.nbest`), ``predict_one(x, constraints=...)``
decodes sequences and multi-label outputs under :class:`streamssvm.Constraints`, and
``explain_one(x)`` each feature's contribution to the prediction and the runner-up
(:mod:`streamssvm.inspection`).
"""
from .base import Estimator, from_state, load
from .extreme import ExtremeClassifier
from .graph import GraphSegmenter
from .multiclass import MulticlassSSVM
from .multilabel import MultiLabelSSVM
from .sequence import SequenceTagger

__all__ = ["Estimator", "ExtremeClassifier", "GraphSegmenter", "MulticlassSSVM", "MultiLabelSSVM", "SequenceTagger",
           "from_state", "load"]
