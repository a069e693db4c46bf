"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW
from .cutting_plane import CuttingPlane
from .memoir import MEMOIR
from .sgd import SGD
from .bmrm import BMRM; from .pragam import Pragam  # noqa: E702

__all__ = ["Learner", "BCFW", "CuttingPlane", "MEMOIR", "SGD", "BMRM", "Pragam"]
