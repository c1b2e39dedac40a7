from tests.client.live_broker import live_broker  # noqa: F401  (session-wide broker process)
