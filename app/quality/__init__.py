"""Quality cards: what a quantization costs, measured with llama.cpp's own tools on the user's text."""
