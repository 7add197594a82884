"""Decoding: greedy and beam search over the attention cache, the batched :class:`Translator`,
teacher-forced scoring, and loading a checkpoint into a ready translator."""
