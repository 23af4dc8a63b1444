"""The drafter names that are not paths: what `--drafter` and the presets accept."""

NGRAM = "ngram"  # prompt lookup
NONE = "none"  # plain decoding through the same loop
BUILTIN = (NGRAM, NONE)
