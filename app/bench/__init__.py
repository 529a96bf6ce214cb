"""Load generation and serving benchmarks: concurrency sweeps through the gateway, saved as benchmark cards."""
