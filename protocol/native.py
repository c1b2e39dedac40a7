"""The native protocol's messages in one namespace: requests.py and responses.py.

Contract: a re-export only, so callers may write `from protocol.native import ...`;
the layouts and rules live in the two modules it names.
"""

from .requests import *  # noqa: F401,F403
from .requests import __all__ as _requests_all
from .responses import *  # noqa: F401,F403
from .responses import __all__ as _responses_all

__all__ = [*_requests_all, *_responses_all]
