"""What-if and demo reports: list the report directories and resolve files in them safely.

A report is a directory directly under ``settings.reports_dir``. Only files with a known,
harmless type are served, and a requested path is accepted only when every segment is a plain
name and the resolved file lies inside the reports directory (no ``..``, no absolute paths, no
symlinks leading out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.errors import NotFound

SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".csv": "text/csv; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".parquet": "application/vnd.apache.parquet",
}
MAX_DEPTH = 3


@dataclass(frozen=True)
class ReportFile:
    path: str  # relative to the report directory, with "/" separators
    size: int

    @property
    def is_image(self) -> bool:
        return self.path.endswith((".png", ".svg"))


@dataclass(frozen=True)
class Report:
    name: str
    modified: datetime
    files: list[ReportFile]

    @property
    def has_html(self) -> bool:
        return any(f.path == "report.html" for f in self.files)


def _files(directory: Path, root: Path, depth: int = 0) -> list[ReportFile]:
    found: list[ReportFile] = []
    for entry in sorted(directory.iterdir()):
        if not SEGMENT.match(entry.name) or entry.is_symlink():
            continue
        if entry.is_dir() and depth < MAX_DEPTH:
            found.extend(_files(entry, root, depth + 1))
        elif entry.is_file() and entry.suffix.lower() in MEDIA_TYPES:
            found.append(ReportFile(entry.relative_to(root).as_posix(), entry.stat().st_size))
    return found


def list_reports(reports_dir: Path) -> list[Report]:
    """Report directories, newest first; an absent reports directory simply has none."""
    if not reports_dir.is_dir():
        return []
    reports = [
        Report(
            name=entry.name,
            modified=datetime.fromtimestamp(entry.stat().st_mtime, UTC),
            files=_files(entry, entry),
        )
        for entry in reports_dir.iterdir()
        if entry.is_dir() and not entry.is_symlink() and SEGMENT.match(entry.name)
    ]
    return sorted(reports, key=lambda r: r.modified, reverse=True)


def get_report(reports_dir: Path, name: str) -> Report:
    for report in list_reports(reports_dir):
        if report.name == name:
            return report
    raise NotFound(f"report {name!r} not found in {reports_dir}", field="report")


def resolve_file(reports_dir: Path, name: str, relative: str) -> tuple[Path, str]:
    """The file and its media type, or NotFound for anything outside the rules above."""
    segments = relative.split("/")
    if (
        not SEGMENT.match(name)
        or not relative
        or len(segments) > MAX_DEPTH + 1
        or not all(SEGMENT.match(s) and s not in (".", "..") for s in segments)
    ):
        raise NotFound(f"no such report file {name}/{relative}", field="path")
    root = reports_dir.resolve()
    path = (root / name).joinpath(*segments).resolve()
    media = MEDIA_TYPES.get(path.suffix.lower())
    if media is None or not path.is_relative_to(root / name) or not path.is_file():
        raise NotFound(f"no such report file {name}/{relative}", field="path")
    return path, media
