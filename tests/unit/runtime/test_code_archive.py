"""The zip a cluster session ships to its executors: fedload's packages, importable from it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from spark_jobs.code_archive import code_archive


def test_the_archive_holds_both_packages_and_python_imports_them_from_it(tmp_path: Path) -> None:
    archive = code_archive(tmp_path)
    names = set(zipfile.ZipFile(archive).namelist())
    # What executors run: the SUnion reader and the catalogue's fragments (and what they import).
    assert {"spark_jobs/runtime/sunion.py", "spark_jobs/fragments/catalogue.py"} <= names
    assert {"app/__init__.py", "app/participant/command.py"} <= names
    assert not any("__pycache__" in name for name in names)
    # -S: no site-packages, so nothing but the zip can provide the packages.
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import app, spark_jobs; "
            "print(app.__file__); print(spark_jobs.__file__)",
            str(archive),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert done.stdout.split() == [
        str(archive / "app" / "__init__.py"),
        str(archive / "spark_jobs" / "__init__.py"),
    ]


def test_the_same_code_gives_the_same_archive_name(tmp_path: Path) -> None:
    first = code_archive(tmp_path)
    assert code_archive(tmp_path) == first
    assert first.name.startswith("fedload-") and first.suffix == ".zip"
