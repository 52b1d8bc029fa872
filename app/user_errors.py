"""A mistake the user can fix, said in one line: what is wrong, then what to do.

Raised anywhere a command meets bad input or a missing prerequisite; ``app/cli_errors.py``
prints it as one red line and exits with status 2. Kept free of CLI and framework imports so
the engine, the agent and the Spark jobs can raise it.
"""

from __future__ import annotations


class UserError(Exception):
    def __init__(self, problem: str, remedy: str | None = None) -> None:
        self.problem = problem
        self.remedy = remedy
        super().__init__(self.line())

    def line(self) -> str:
        text = self.problem if self.remedy is None else f"{self.problem}; {self.remedy}"
        # One line, whatever the parts held (a path, a server's message).
        return " ".join(text.split())
