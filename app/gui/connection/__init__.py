"""The window's link to the service: every blocking call off the GUI thread, live events as signals."""
