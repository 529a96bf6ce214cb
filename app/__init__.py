"""ModelDeck: a desktop control center for serving language models locally."""

__version__ = "0.1.0"
