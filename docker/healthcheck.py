"""The image's HEALTHCHECK: healthy when the broker answers a METADATA request.

A bare TCP connect would pass as soon as the socket is bound, even if the broker
cannot serve; this sends a real METADATA request (all topics) with the project's
own codec and wants a well-formed answer with error NONE.

Usage: python healthcheck.py [PORT]   (default: $STRATA_PORT, else 9000; host 127.0.0.1).
Exit 0 healthy, 1 unhealthy, with one line saying why.
Only the standard library and the installed `protocol` package: no extra dependencies.
"""

from __future__ import annotations

import os
import socket
import sys

from protocol import ErrorCode, FrameDecoder, MetadataRequest, RequestType, encode_request, parse_response

TIMEOUT_S = 4.0  # under the HEALTHCHECK --timeout, so a hung broker gets a message, not a kill
MAX_FRAME = 64 << 20  # a METADATA answer for a great many topics, still bounded


def check(host: str, port: int, timeout: float = TIMEOUT_S) -> str | None:
    """None when healthy, else the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(encode_request(MetadataRequest(topics=())))
            decoder = FrameDecoder(MAX_FRAME)
            while (frame := decoder.next_frame()) is None:
                chunk = sock.recv(65536)
                if not chunk:
                    return "connection closed before a response"
                decoder.feed(chunk)
            response = parse_response(RequestType.METADATA, frame)
    except OSError as e:
        return f"{host}:{port}: {e.strerror or e}"
    except Exception as e:  # a malformed answer is unhealthy too
        return f"{host}:{port}: bad response: {type(e).__name__}: {e}"
    if response.error != ErrorCode.NONE:
        return f"{host}:{port}: METADATA answered error {response.error!r}"
    return None


def main(argv: list[str]) -> int:
    port = int(argv[1]) if len(argv) > 1 else int(os.environ.get("STRATA_PORT") or 9000)
    host = "127.0.0.1"
    problem = check(host, port)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    print(f"healthy: {host}:{port} answers METADATA")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
