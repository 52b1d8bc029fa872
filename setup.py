"""Build hook: put the migrations, the Alembic configuration and the contracts into the wheel.

Everything else about the package is declared in pyproject.toml. The repository keeps
``migrations/``, ``alembic.ini`` and ``contracts/`` at the top level (the product's layout), where
a wheel cannot install them; this copies them into ``app/_bundled/`` with the same relative
layout, where ``app/resources.py`` finds them in an installed fedload. An editable install
skips the copy and reads the checkout's own files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Mirrors app.resources.BUNDLED (this file imports nothing from app; a packaging test pins it).
BUNDLED = ("alembic.ini", "migrations", "contracts")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "app" / "_bundled"
        for name in BUNDLED:
            source = HERE / name
            if not source.exists():
                raise FileNotFoundError(f"{source}: missing from the source tree (MANIFEST.in?)")
            destination = target / name
            if source.is_dir():
                shutil.copytree(source, destination, ignore=SKIP, dirs_exist_ok=True)
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, destination)


setup(cmdclass={"build_py": BuildPyWithData})
