"""Turning a model and this machine into a launch plan."""
