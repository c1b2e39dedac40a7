"""The asyncio face of the client, in one namespace.

Contract: a re-export only. `from client.aio import AsyncProducer` reads better
in asyncio code and makes plain which classes must be used inside a running
loop; the classes themselves live in admin.py, producer.py and consumer.py.
"""

from .admin import AsyncAdmin
from .connection import AsyncConnection
from .consumer import AsyncConsumer
from .producer import AsyncProducer

__all__ = ["AsyncAdmin", "AsyncConnection", "AsyncConsumer", "AsyncProducer"]
