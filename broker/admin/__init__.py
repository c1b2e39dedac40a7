"""Observability: the broker's metrics (broker/METRICS.md) and the HTTP admin port serving them."""
