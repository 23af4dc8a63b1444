"""Drafters: a separate small LM, prompt lookup, or none."""

from .base import Draft, Drafter
from .model import ModelDrafter
from .ngram import PromptLookupDrafter
from .none import NoDrafter

__all__ = ["Draft", "Drafter", "ModelDrafter", "NoDrafter", "PromptLookupDrafter"]
