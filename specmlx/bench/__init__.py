"""`specmlx bench`: target alone, mlx-lm's speculative decoding and
specmlx, measured in one process, interleaved prompt by prompt.

Every mode decodes from the same state: the prompt minus its last token
already in the caches, so that decode time starts with the forward of the
last prompt token and prompt processing is never counted.
"""
