"""Engines ModelDeck installs or builds for the user, each in its own place under the data directory."""
