"""Test-only fault points: `STRATA_TEST_CRASH_AT=txn:<step>` in the broker's
environment kills the process (SIGKILL, as kill -9) when the transaction
coordinator reaches that step, so tests can check crash safety at exact points.
Steps: after-add-partitions (Ongoing written), before-prepare (EndTxn
arrived, its records are in the logs, nothing decided), after-prepare (PrepareCommit or
PrepareAbort written, no marker), after-first-marker (one marker written),
before-complete (every marker written, no Complete* record). Unset: nothing.
"""

from __future__ import annotations

import os
import signal

ENV = "STRATA_TEST_CRASH_AT"
_AT = os.environ.get(ENV, "")


def crash_point(step: str) -> None:
    if _AT and f"txn:{step}" == _AT:
        os.kill(os.getpid(), signal.SIGKILL)
