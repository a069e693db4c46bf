"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW
from .memoir import MEMOIR

__all__ = ["Learner", "BCFW", "MEMOIR"]
