"""Decoding: greedy and beam search over the attention cache, the batched :class:`Translator`,
and loading a checkpoint into a ready translator."""
