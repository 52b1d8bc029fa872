"""A task field that cannot be used, named by its path inside the task."""

from __future__ import annotations

from collections.abc import Sequence

Path = tuple[str | int, ...]


def field_name(path: Sequence[str | int]) -> str:
    """``("params", "seed")`` -> ``params.seed``, ``("inputs", 0, "task")`` -> ``inputs[0].task``.

    The federation loader names a file's fields the same way."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class FragmentError(ValueError):
    """A fragment, parameter or input that cannot be used; ``path`` names where, inside the task
    (``("params", "window_seconds")``), and ``field`` renders it (``params.window_seconds``)."""

    def __init__(self, detail: str, path: Sequence[str | int]) -> None:
        super().__init__(detail)
        self.detail = detail
        self.path: Path = tuple(path)

    @property
    def field(self) -> str:
        return field_name(self.path)
