"""Structures: what is predicted (feature map layout, loss, oracles)."""
from .base import Structure, Weights
from .chain import Chain
from .graph import BinaryGraph
from .hierarchy import Hierarchy
from .multiclass import MultiClass
from .multilabel import MultiLabel

__all__ = ["Structure", "Weights", "BinaryGraph", "Chain", "MultiClass", "MultiLabel", "Hierarchy"]
