"""Reports are listed from FEDLOAD_REPORTS_DIR and served without leaving it."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.settings import Settings

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def _write(settings: Settings) -> None:
    demo = settings.reports_dir / "demo"
    (demo / "plots").mkdir(parents=True)
    (demo / "report.html").write_text("<h1>demo</h1><img src='loads.png'>")
    (demo / "loads.png").write_bytes(PNG)
    (demo / "plots" / "moves.png").write_bytes(PNG)
    (demo / "summary.json").write_text('{"acceptable": true}')
    (demo / "notes.py").write_text("print('not served')")
    (settings.reports_dir.parent / "secret.json").write_text('{"value": "TOP-SECRET-CONTENT"}')
    (settings.reports_dir / "leak").symlink_to(settings.reports_dir.parent)


def test_reports_are_listed_and_opened(admin: TestClient, settings: Settings) -> None:
    _write(settings)
    listing = admin.get("/admin/reports").text
    assert 'data-report="demo"' in listing
    assert 'data-report="leak"' not in listing  # a symlink is not a report
    page = admin.get("/admin/reports/demo").text
    for name in ("report.html", "loads.png", "plots/moves.png", "summary.json"):
        assert f"/admin/reports/demo/files/{name}" in page
    assert "notes.py" not in page

    html = admin.get("/admin/reports/demo/files/report.html")
    assert html.status_code == 200 and html.text.startswith("<h1>demo</h1>")
    # A report's HTML runs no scripts, whoever wrote it.
    assert "default-src 'none'" in html.headers["content-security-policy"]
    png = admin.get("/admin/reports/demo/files/plots/moves.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content == PNG


def test_no_path_leaves_the_reports_directory(admin: TestClient, settings: Settings) -> None:
    _write(settings)
    for path in (
        "/admin/reports/demo/files/../../secret.json",
        "/admin/reports/demo/files/..%2F..%2Fsecret.json",
        "/admin/reports/demo/files/%2e%2e/%2e%2e/secret.json",
        "/admin/reports/demo/files//etc/passwd",
        "/admin/reports/leak/files/secret.json",
        "/admin/reports/demo/files/notes.py",
        "/admin/reports/demo/files/.hidden",
        "/admin/reports/nope/files/report.html",
        "/admin/reports/leak",
    ):
        response = admin.get(path)
        assert response.status_code == 404, path
        assert "TOP-SECRET-CONTENT" not in response.text, path


def test_no_reports_directory_is_an_empty_list(admin: TestClient) -> None:
    page = admin.get("/admin/reports").text
    assert "No reports yet" in page
