"""Inference engines and the supervisor that runs them. Knows nothing of the application."""
