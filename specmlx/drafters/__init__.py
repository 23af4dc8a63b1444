"""Drafters: a separate small LM, an MTP-style head, prompt lookup, or none."""

from .base import Draft, Drafter, HiddenDrafter, KeepsOnDisk, ModelDrafting, keeps_on_disk, missing_members, reads_hidden
from .labels import BUILTIN, MTP, NGRAM, NONE
from .model import ModelDrafter
from .ngram import PromptLookupDrafter
from .none import NoDrafter


__all__ = ["BUILTIN", "MTP", "NGRAM", "NONE", "Draft", "Drafter", "HiddenDrafter", "KeepsOnDisk", "ModelDrafter", "ModelDrafting",
           "NoDrafter", "PromptLookupDrafter", "keeps_on_disk", "missing_members", "reads_hidden"]
