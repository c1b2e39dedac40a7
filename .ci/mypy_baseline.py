"""Hold mypy's error count per file at or below a committed baseline (issue 13, item 7).

Usage (from anywhere; `make lint` runs it with the venv's Python):
    python .ci/mypy_baseline.py           # the gate
    python .ci/mypy_baseline.py --update  # rewrite the baseline after fixing errors

The gate runs mypy with the project's config (pyproject.toml [tool.mypy]) and
`--follow-imports=silent` over PACKAGES, counts the errors of each file, and
compares them with BASELINE: sorted `path count` lines, where a file not listed
has 0. It fails when a file has more errors than its line, printing that file's
errors; a file with fewer passes, with a reminder to lower its line. protocol/
and kafka_format/ are not here: `make lint` holds them at 0 errors outright.

`--update` only lowers: it writes the current counts, and refuses (the same
failure as the gate) while any file is over its line. Raising a line is a
hand edit that shows in review.

mypy's cache is .mypy_cache/ (gitignored): a stale cache gives the same result
as a cold run, only faster.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["storage/", "broker/", "client/", "pipeline/"]
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
# `path:line: error: ...` (or `path:line:column: error: ...` under show_column_numbers).
ERROR_LINE = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: ")


def run_mypy() -> list[tuple[str, str]]:
    """mypy's errors over PACKAGES as (path, line); exits if mypy itself fails (status 2 or more)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", *PACKAGES],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    errors = [(match["path"], line) for line in done.stdout.splitlines()
              if (match := ERROR_LINE.match(line)) is not None]
    if done.returncode > 1 or (done.returncode == 1 and not errors):
        sys.exit(f"mypy failed (exit status {done.returncode}):\n{done.stdout}{done.stderr}")
    return errors


def read_baseline() -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in BASELINE.read_text().splitlines():
        if line.strip():
            path, count = line.split()
            counts[path] = int(count)
    return counts


def main(argv: list[str]) -> int:
    errors = run_mypy()
    current = Counter(path for path, _ in errors)
    baseline = read_baseline()
    over = sorted(path for path in current if current[path] > baseline[path])
    under = sorted(path for path in baseline if current[path] < baseline[path])
    for path in over:
        print(f"{path}: {current[path]} mypy error(s), baseline {baseline[path]}:")
        print("\n".join(f"    {line}" for error_path, line in errors if error_path == path))
    if over:
        print(f"mypy baseline: {len(over)} file(s) over {BASELINE.relative_to(ROOT)}; fix the new errors")
        return 1
    if "--update" in argv:
        BASELINE.write_text("".join(f"{path} {count}\n" for path, count in sorted(current.items())))
        print(f"mypy baseline: {BASELINE.relative_to(ROOT)} now holds {current.total()} errors "
              f"in {len(current)} files")
        return 0
    for path in under:
        print(f"{path}: {current[path]} mypy error(s), baseline {baseline[path]}: lower it "
              f"(python .ci/mypy_baseline.py --update)")
    print(f"mypy baseline: {current.total()} errors in {len(current)} files, "
          f"baseline {baseline.total()}: none over")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
