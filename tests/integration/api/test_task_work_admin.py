"""The admin pages label synthetic tasks and say what a real task runs."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.integration.admin.conftest import sign_in
from tests.integration.api.conftest import ADMIN_KEY, Api
from tests.integration.api.test_task_work import DAILY, READINGS, declare


def test_synthetic_tasks_carry_a_badge_and_real_ones_say_what_they_run(
    db_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=db_url,
        admin_key=ADMIN_KEY,
        session_secret="test-session-secret",
        environment="test",
        reports_dir=tmp_path / "reports",
    )
    with TestClient(create_app(settings)) as client:
        api = Api(client=client, keys={})
        api.register("A")
        declare(api, "A", READINGS)
        declare(api, "A", DAILY)
        declare(api, "A", {"name": "A.q1", "load": 3.0})
        admin = sign_in(TestClient(client.app))
        page = admin.get("/admin/allocation").text
        row = {
            name: page.split(f'data-task="{name}"')[1].split("</tr>")[0]
            for name in ("A.readings", "A.daily", "A.q1")
        }
        assert 'class="badge badge-synthetic">synthetic<' in row["A.q1"]
        assert "synthetic" not in row["A.daily"] and "synthetic" not in row["A.readings"]
        runs = re.compile(r'id="task-runs">(.*?)</span></div>', re.S)
        shown = {
            name: runs.search(admin.get(f"/admin/tasks/{name}").text)
            for name in ("A.readings", "A.daily", "A.q1")
        }
        assert shown["A.readings"] is not None and shown["A.readings"].group(1) == "source: files"
        assert shown["A.daily"] is not None and shown["A.daily"].group(1) == "sql"
        assert shown["A.q1"] is not None
        assert "badge-synthetic" in shown["A.q1"].group(1)
        assert "a declared load" in shown["A.q1"].group(1)
