"""Is there a Java that Spark 4 can run on? Checked before a SparkSession starts.

Without it PySpark fails deep in its launcher ("JAVA_GATEWAY_EXITED") after printing the shell
script's own complaints; this says what is missing and how to install it, in one line. It finds
``java`` the way Spark's launcher does: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else
``java`` on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from app.user_errors import UserError

MINIMUM_MAJOR = 17  # Spark 4.0 dropped Java 8 and 11
INSTALL = "install Java 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
# 'openjdk version "17.0.15" 2025-04-15', 'java version "1.8.0_402"', 'openjdk version "21"'
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


class JavaMissing(UserError):
    pass


def find_java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return candidate if os.access(candidate, os.X_OK) else None
    found = shutil.which("java")
    return Path(found) if found else None


def java_major(version_output: str) -> int | None:
    match = _VERSION.search(version_output)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older call themselves 1.x.
    return int(match.group(2) or 0) if major == 1 else major


def java_problem() -> str | None:
    """None when a usable Java is there, else what is wrong (without the remedy)."""
    home = os.environ.get("JAVA_HOME")
    java = find_java()
    if java is None:
        if home:
            return f"JAVA_HOME={home} has no executable bin/java (Spark needs Java 17+)"
        return "Java is not installed or not on PATH (Spark needs Java 17+)"
    try:
        ran = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{java} -version failed ({error})"
    # `java -version` writes to stderr; some builds write to stdout.
    major = java_major(ran.stderr + ran.stdout)
    if major is None:
        first = (ran.stderr or ran.stdout).strip().splitlines()[:1]
        return f"cannot read the Java version of {java} from {first[0] if first else 'nothing'!r}"
    if major < MINIMUM_MAJOR:
        return f"{java} is Java {major}; Spark 4 needs Java {MINIMUM_MAJOR} or newer"
    return None


@lru_cache(maxsize=1)
def _checked(java_home: str | None, path: str | None) -> str | None:
    return java_problem()


def require_java() -> None:
    """Raise JavaMissing unless Spark can start; cached per JAVA_HOME and PATH (a JVM start)."""
    problem = _checked(os.environ.get("JAVA_HOME"), os.environ.get("PATH"))
    if problem is not None:
        raise JavaMissing(problem, INSTALL)


# Set (to anything) in a process's environment, the Spark JVMs it starts compile with C1 only.
# Opt-in, off by default, tests included. For a JVM that lives under a minute C2's compilations
# cost more CPU than they return: tests/integration/ha/test_spark_dpc.py, interleaved pairs,
# 2 vCPU otherwise idle, the machine's CPU 80 s -> 59 s (0.74, bench.runtime.quick_jit). But a
# CI run with it on (session 27) had a downstream fragment of a five-minute scenario fall behind
# real time (0.6 buckets a second) at load 10, which the same test never did with C2: Spark's
# per-batch planning code runs slower without C2 once a JVM lives minutes. Not measured apart.
QUICK_JIT_ENV = "FEDLOAD_SPARK_QUICK_JIT"
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"


def with_quick_jit(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with C1-only compilation added to the driver's and executors' Java options when
    ``QUICK_JIT_ENV`` is set (options already there are kept)."""
    if not os.environ.get(QUICK_JIT_ENV):
        return conf
    conf = dict(conf)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        options = conf.get(key, "")
        if QUICK_JIT_OPTION not in options.split():
            conf[key] = f"{options} {QUICK_JIT_OPTION}".strip()
    return conf
