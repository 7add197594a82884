"""Data: sources, the joint tokenizer, the encoded corpus and token-bounded batches."""
