"""Parts that several pages use: the item model of the models, their states in words, shared panels and helpers."""
