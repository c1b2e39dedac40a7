"""The broker process's C heap policy: request-sized buffers are reused, not faulted in anew.

Contract:
- Every request of up to a few MiB allocates buffers of its size that live until
  it is answered: a Kafka Produce's records are decoded into a new bytes object
  (kio copies the field), appends and replies build their own. glibc's default
  policy hands such a block back to the kernel soon after it is freed: a block
  above its mmap threshold is unmapped at once, and the heap's top is trimmed once
  more than twice the largest block freed so far lies free there. The next
  request's buffer then page-faults every page in again, kernel time that grows
  with the request's size.
- `keep_freed_memory()` (run_broker, once, before serving) sets glibc's
  M_MMAP_THRESHOLD to 32 MiB (its maximum: larger blocks are still mapped and
  unmapped on their own) and M_TRIM_THRESHOLD to 64 MiB, so freed request
  buffers stay in the process for the next requests; up to that much freed
  memory per arena stays after a burst. Returns whether the settings were made.
- Only with glibc; elsewhere, or when a call is refused, nothing changes.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_freed_memory() -> bool:
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success, 0 on a refused value.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))


__all__ = ["keep_freed_memory"]
