from tests.client.conftest import broker  # noqa: F401  (the same session-wide broker process)
