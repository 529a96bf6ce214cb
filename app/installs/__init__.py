"""Engines ModelDeck installs or builds itself, and the engines available on this machine."""
