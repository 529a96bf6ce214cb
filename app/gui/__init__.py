"""The ModelDeck window: a PySide6 client of the service, talking to it only through app.client."""
