"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW
from .cutting_plane import CuttingPlane
from .gdmm import GDMM
from .memoir import MEMOIR
from .sgd import SGD

__all__ = ["Learner", "BCFW", "CuttingPlane", "GDMM", "MEMOIR", "SGD"]
