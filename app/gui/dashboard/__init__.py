"""The Dashboard page: live tiles and charts of throughput, latency and memory."""
