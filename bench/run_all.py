"""Run every benchmark topic in turn: ``python -m bench.run_all [topic ...]``.

Each topic lives in ``bench/<topic>/`` with a ``run`` module (runnable as
``python -m bench.<topic>.run``), or the module named in ``MODULES``, and a README holding its
figures, command and machine.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Topics whose entry point is not ``run``.
MODULES = {"agents": "move_downtime", "own_work": "sql_files"}


def topics() -> list[str]:
    return sorted({p.parent.name for p in HERE.glob("*/run.py")} | set(MODULES))


def main(argv: list[str]) -> int:
    chosen = argv or topics()
    unknown = sorted(set(chosen) - set(topics()))
    if unknown:
        print(f"unknown benchmark topic(s): {', '.join(unknown)}; known: {', '.join(topics())}")
        return 2
    for topic in chosen:
        print(f"== bench/{topic} ==", flush=True)
        saved = sys.argv
        module = f"bench.{topic}.{MODULES.get(topic, 'run')}"
        sys.argv = [module]
        try:
            runpy.run_module(module, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                return int(exc.code) if isinstance(exc.code, int) else 1
        finally:
            sys.argv = saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
