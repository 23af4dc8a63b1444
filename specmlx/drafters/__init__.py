"""Drafters: a separate small LM, an MTP-style head, a block drafter, prompt lookup, suffix lookup over a
session, or none."""

from .base import (Draft, Drafter, DraftsBlocks, HiddenDrafter, KeepsOnDisk, ModelDrafting, Remembers, drafts_blocks,
                   keeps_on_disk, missing_members, reads_hidden, tell_finished, tell_owner)
from .labels import BUILTIN, MTP, NGRAM, NONE, SUFFIX
from .model import ModelDrafter
from .ngram import PromptLookupDrafter
from .none import NoDrafter
from .suffix import SuffixDrafter


__all__ = ["BUILTIN", "MTP", "NGRAM", "NONE", "SUFFIX", "Draft", "Drafter", "DraftsBlocks", "HiddenDrafter",
           "KeepsOnDisk", "ModelDrafter", "ModelDrafting", "NoDrafter", "PromptLookupDrafter", "Remembers", "SuffixDrafter",
           "drafts_blocks", "keeps_on_disk", "missing_members", "reads_hidden", "tell_finished", "tell_owner"]
