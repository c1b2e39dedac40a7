"""Strata's native wire protocol: a sans-IO codec (no sockets, no event loop).

Contract: bytes in, values out, and back. `FrameDecoder` splits a stream into
frames, `parse_request`/`encode_request` and `parse_response`/`encode_response`
(with the sendfile header helpers) turn frames into dataclasses and back, and
every malformed input raises `ProtocolError` carrying the wire code to answer.
See NATIVE.md in this directory for the decisions where the spec is silent.
"""

from .errors import ErrorCode, ProtocolError, as_error_code
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameTooLarge
from .requests import *  # noqa: F401,F403
from .requests import __all__ as _requests_all
from .responses import *  # noqa: F401,F403
from .responses import __all__ as _responses_all
from .topics import InvalidTopicName, has_collision, validate_topic_name

__all__ = [
    "ErrorCode", "ProtocolError", "as_error_code",
    "DEFAULT_MAX_FRAME_BYTES", "FrameDecoder", "FrameTooLarge",
    "InvalidTopicName", "has_collision", "validate_topic_name",
    *_requests_all, *_responses_all,
]
