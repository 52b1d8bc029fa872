"""Check the real components the test suite needs, before pytest starts.

Under ``CI=true`` a missing component is a failure with a clear message, never a silent skip.
Outside CI the same gaps are only reported, and the tests that need them fail at their fixtures.
"""

from __future__ import annotations

import os
import sys

from app.java import INSTALL as JAVA_INSTALL
from app.java import java_problem as app_java_problem
from tests.support.components import nats_problem, postgres_problem, postgres_url


def java_problem() -> str | None:
    # The check fedload itself runs before Spark starts (JAVA_HOME first, as Spark's launcher).
    problem = app_java_problem()
    return None if problem is None else f"{problem}: {JAVA_INSTALL}"


def chromium_problem() -> str | None:
    if not os.path.exists("/usr/bin/chromium"):
        return "Debian chromium is missing at /usr/bin/chromium: apt-get install chromium"
    return None


def main() -> int:
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    problems = {
        "PostgreSQL": postgres_problem(postgres_url()),
        "Java": java_problem(),
        "Chromium": chromium_problem(),
        # Participants' own sources and sinks read and write a real JetStream server.
        "NATS JetStream": nats_problem(),
    }
    missing = {name: why for name, why in problems.items() if why}
    for name, why in missing.items():
        print(f"prerequisite missing: {name}: {why}", file=sys.stderr)
    if missing and in_ci:
        print(
            "CI=true: these components are required; failing instead of skipping.", file=sys.stderr
        )
        return 1
    if not missing:
        print("prerequisites: PostgreSQL, Java 17+, Chromium and NATS JetStream are present")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
