"""The native protocol's adapters over the partition service (NATIVE-PROTOCOL.md):
`Handlers` (handlers.py, which lists the per-job modules) is what the native
listener serves; `SessionHandlers` (session.py) is one connection's view of it.
"""

from __future__ import annotations

from .handlers import Handlers
from .session import SessionHandlers
from .session_state import NativeSession, produce_answer

__all__ = ["Handlers", "NativeSession", "SessionHandlers", "produce_answer"]
