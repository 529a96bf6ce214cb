"""Measurement: per-request metering and the request log, the samplers, time series and their SQLite history."""
