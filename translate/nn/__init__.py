"""The model core, torch only: attention, layers, the Transformer and its loss.

Tensors in, tensors out: nothing here reads configuration, touches files or sets up logging,
and nothing imports the rest of the package.
"""
