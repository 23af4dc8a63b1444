"""Training specmlx's own MTP drafter heads on a target's hidden states."""
