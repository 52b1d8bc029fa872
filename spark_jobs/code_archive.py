"""fedload's own code as one zip, for Spark executors on workers that do not have it installed.

A fragment runs partly on executors: the SUnion data source reads the partners' Flight logs
there, and the fragment's functions are pickled by reference to their modules. A standalone
cluster's workers start Python with whatever is installed on them, so the driver ships the
packages with the session (``spark.submit.pyFiles``); Python imports from a zip on its path.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import app
import spark_jobs

PACKAGES = (app, spark_jobs)


def _files() -> list[tuple[Path, str]]:
    found = []
    for package in PACKAGES:
        assert package.__file__ is not None
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append((path, str(Path(root.name) / path.relative_to(root))))
    return found


def code_archive(directory: Path | None = None) -> Path:
    """Zip ``app`` and ``spark_jobs`` (named by a digest of their contents, so a changed tree
    gets a new archive and a running session's is never rewritten under it)."""
    files = _files()
    digest = hashlib.sha256()
    for path, name in files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    out_dir = directory or Path(tempfile.gettempdir()) / "fedload-code"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"fedload-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    partial = target.with_suffix(f".{os.getpid()}.part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in files:
            archive.write(path, name)
    partial.replace(target)  # atomic: concurrent agents never see half an archive
    return target
