"""The drafter names that are not paths: what `--drafter` and the presets accept."""

NGRAM = "ngram"  # prompt lookup
SUFFIX = "suffix"  # suffix lookup over the owner's session (`suffix.py`)
NONE = "none"  # plain decoding through the same loop
MTP = "mtp"  # specmlx's MTP head: its role in the presets, and its drafter's default name
BUILTIN = (NGRAM, SUFFIX, NONE)
