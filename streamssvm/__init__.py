"""streamssvm: streaming / online learning of structural SVMs with duality-gap certificates."""
from . import datasets, learners, structures
from .certificate import Certificate
from .estimators import ExtremeClassifier, MulticlassSSVM, MultiLabelSSVM, SequenceTagger, load

__version__ = "0.1.0"

__all__ = ["Certificate", "ExtremeClassifier", "MulticlassSSVM", "MultiLabelSSVM", "SequenceTagger", "datasets",
           "learners", "load", "structures", "__version__"]
