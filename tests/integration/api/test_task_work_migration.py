"""Migration 0011 on SQLite and PostgreSQL: tasks from before it become synthetic exactly when
they run no fragment, and read with their stream's schema; the downgrade drops the columns."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from app.db.migrate import alembic_config, upgrade
from app.db.session import dispose_engines, get_engine, unit_of_work
from app.models import Task
from app.tasks import service
from tests.integration.api.test_audit import scratch_database
from tests.support.databases import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_old_tasks_are_synthetic_when_they_run_nothing(backend: str, tmp_path: Path) -> None:
    with scratch_database(backend, tmp_path) as url:
        upgrade(url, "0010")
        with get_engine(url).begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO participants (name, capacity, profile, cost_model, api_key_hash,"
                    " status, liveness, created_at, updated_at) VALUES ('A', 10, '{}', '{}', :h,"
                    " 'active', 'unknown', '2026-11-01 10:00:00', '2026-11-01 10:00:00')"
                ),
                {"h": "a" * 64},
            )
            for name, fragment in (("A.conns", "generator"), ("A.q1", None)):
                conn.execute(
                    sa.text(
                        "INSERT INTO tasks (name, owner_id, host_id, load, fragment, host_since,"
                        " pinned, lease_epoch, version, created_at) VALUES (:n, 1, 1, 5, :f,"
                        " '2026-11-01 10:00:00', false, 0, 1, '2026-11-01 10:00:00')"
                    ),
                    {"n": name, "f": fragment},
                )
        dispose_engines(url)
        upgrade(url)
        with unit_of_work(url) as session:
            tasks = list(session.scalars(sa.select(Task).order_by(Task.name)))
            assert [(t.name, t.synthetic, t.work, t.output_schema) for t in tasks] == [
                ("A.conns", False, {}, None),
                ("A.q1", True, {}, None),
            ]
            shown = {t.name: t.output_schema for t in service.to_read(session, tasks)}
        assert shown == {
            "A.conns": "src_ip STRING, dst_ip STRING, dst_port INT, stime TIMESTAMP",
            "A.q1": None,
        }
        dispose_engines(url)
        command.downgrade(alembic_config(url), "0010")
        columns = {c["name"] for c in sa.inspect(get_engine(url)).get_columns("tasks")}
        assert {"work", "synthetic", "output_schema", "analysis_error"} & columns == set()
        dispose_engines(url)
