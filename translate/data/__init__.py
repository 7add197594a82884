"""Data: sources of parallel text, the joint SentencePiece tokenizer, the encoded corpus and
token-bounded batches. ``python -m translate.data`` checks a data set before training."""
