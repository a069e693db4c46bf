"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW
from .bmrm import BMRM
from .cutting_plane import CuttingPlane
from .gdmm import GDMM
from .memoir import MEMOIR
from .pragam import Pragam
from .sgd import SGD

__all__ = ["Learner", "BCFW", "BMRM", "CuttingPlane", "GDMM", "MEMOIR", "Pragam", "SGD"]
