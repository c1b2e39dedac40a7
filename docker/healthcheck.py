"""The image's HEALTHCHECK: healthy when the broker says it is ready.

By default it asks the admin port's `/health/ready` (200 once recovery is done and
the listeners serve; 503 before): port $STRATA_ADMIN_PORT, else 9644. With the
admin port off ($STRATA_ADMIN_PORT=-1), or with `--native`, it sends a real
METADATA request (all topics) to the native port with the project's own codec and
wants a well-formed answer with error NONE (a bare TCP connect would pass as soon
as the socket is bound, even if the broker cannot serve).

Usage: python healthcheck.py [PORT]            /health/ready on PORT (default: $STRATA_ADMIN_PORT, else 9644)
       python healthcheck.py --native [PORT]   METADATA on PORT (default: $STRATA_PORT, else 9000)
Host 127.0.0.1. Exit 0 healthy, 1 unhealthy, with one line saying why.
Only the standard library and the installed `protocol` package: no extra dependencies.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.error
import urllib.request

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


def check_ready(host: str, port: int, timeout: float = TIMEOUT_S) -> str | None:
    """None when http://HOST:PORT/health/ready answers 200, else the reason."""
    url = f"http://{host}:{port}/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if response.status == 200:
                return None
            return f"{url} answered {response.status}"
    except urllib.error.HTTPError as e:
        return f"{url} answered {e.code} ({e.reason})"
    except urllib.error.URLError as e:
        reason = e.reason
        return f"{url}: {getattr(reason, 'strerror', None) or reason}"
    except OSError as e:
        return f"{url}: {e.strerror or e}"


def main(argv: list[str]) -> int:
    host = "127.0.0.1"
    args = argv[1:]
    native = bool(args) and args[0] == "--native"
    if native:
        args = args[1:]
    admin_port = int(os.environ.get("STRATA_ADMIN_PORT") or 9644)
    if not native and not args and admin_port < 0:
        native = True  # no admin port: ask the native listener
    if native:
        port = int(args[0]) if args else int(os.environ.get("STRATA_PORT") or 9000)
        problem, what = check(host, port), "answers METADATA"
    else:
        port = int(args[0]) if args else admin_port
        problem, what = check_ready(host, port), "/health/ready answers 200"
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    print(f"healthy: {host}:{port} {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
