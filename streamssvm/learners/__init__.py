"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW
from .memoir import MEMOIR
from .sgd import SGD

__all__ = ["Learner", "BCFW", "MEMOIR", "SGD"]
