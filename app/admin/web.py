"""Admin UI mount point (issue 6 builds the pages)."""

from __future__ import annotations

from fastapi import FastAPI

from app.settings import Settings


def mount_admin(app: FastAPI, settings: Settings) -> None:
    """Attach the admin UI under /admin."""
    _ = (app, settings)
