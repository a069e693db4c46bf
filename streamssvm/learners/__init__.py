"""Learners: how the weights move."""
from .base import Learner
from .bcfw import BCFW

__all__ = ["Learner", "BCFW"]
