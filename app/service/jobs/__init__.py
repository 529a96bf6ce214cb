"""Long jobs the service runs for its clients: downloads (kept across restarts) and benchmark runs."""
