"""The Benchmark page: concurrency sweeps, their charts and cards, and quality cards."""
