"""Server-side access control of every admin route: no session, participant keys, CSRF."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from app.admin import actions, pages
from app.settings import Settings
from tests.integration.admin.conftest import csrf_of, sign_in
from tests.integration.admin.seeding import Federation
from tests.support.snapshot import registry_snapshot

# One concrete URL for every route of the admin app. A route missing here fails
# test_every_route_is_listed, so no new page can slip in without an access-control check.
SAMPLE_URLS: dict[tuple[str, str], str] = {
    ("GET", "/login"): "/admin/login",
    ("POST", "/login"): "/admin/login",
    ("POST", "/logout"): "/admin/logout",
    ("GET", "/"): "/admin/",
    ("GET", "/allocation"): "/admin/allocation?participant=A",
    ("GET", "/tasks/{name}"): "/admin/tasks/A.q01",
    ("GET", "/contracts"): "/admin/contracts",
    ("GET", "/contracts/{contract_id}"): "/admin/contracts/1",
    ("GET", "/movements"): "/admin/movements",
    ("GET", "/replicas"): "/admin/replicas",
    ("GET", "/availability"): "/admin/availability",
    ("GET", "/participants/{name}"): "/admin/participants/A",
    ("GET", "/audit"): "/admin/audit",
    ("GET", "/reports"): "/admin/reports",
    ("GET", "/reports/{name}"): "/admin/reports/demo",
    ("GET", "/reports/{name}/files/{path}"): "/admin/reports/demo/files/report.json",
    ("GET", "/participants/{name}/{verb}"): "/admin/participants/A/suspend",
    ("POST", "/participants/{name}/{verb}"): "/admin/participants/A/suspend",
    ("GET", "/contracts/{contract_id}/terminate"): "/admin/contracts/1/terminate",
    ("POST", "/contracts/{contract_id}/terminate"): "/admin/contracts/1/terminate",
    ("GET", "/tasks/{name}/{verb}"): "/admin/tasks/A.q02/pin",
    ("POST", "/tasks/{name}/{verb}"): "/admin/tasks/A.q02/pin",
}
PUBLIC = {("GET", "/login"), ("POST", "/login")}


def _admin_routes() -> set[tuple[str, str]]:
    found = set()
    for route in [*pages.router.routes, *actions.router.routes]:
        if isinstance(route, APIRoute):
            for method in route.methods:
                found.add((method, route.path.replace("{path:path}", "{path}")))
    return found


def _protected(method: str) -> list[str]:
    return [
        url for (m, path), url in SAMPLE_URLS.items() if m == method and (m, path) not in PUBLIC
    ]


def _report(settings: Settings) -> None:
    (settings.reports_dir / "demo").mkdir(parents=True)
    (settings.reports_dir / "demo" / "report.json").write_text('{"ok": true}')


def test_every_route_is_listed() -> None:
    assert _admin_routes() == set(SAMPLE_URLS)


def test_pages_without_a_session_redirect_to_sign_in(
    anonymous: TestClient, settings: Settings
) -> None:
    _report(settings)
    for url in _protected("GET"):
        response = anonymous.get(url, follow_redirects=False)
        assert response.status_code == 303, url
        assert response.headers["location"].startswith("/admin/login?next=/admin/"), url


def test_fragments_and_posts_without_a_session_get_401(
    anonymous: TestClient, settings: Settings, db_url: str
) -> None:
    _report(settings)
    for url in _protected("GET"):
        sep = "&" if "?" in url else "?"
        assert anonymous.get(f"{url}{sep}partial=live").status_code == 401, url
    # A token from the sign-in page is a real token, yet without a session it opens nothing.
    token = csrf_of(anonymous.get("/admin/login").text)
    before = registry_snapshot(db_url)
    for url in _protected("POST"):
        response = anonymous.post(url, data={"csrf_token": token, "version": "1"})
        assert response.status_code == 401, url
    assert registry_snapshot(db_url) == before


def test_the_api_keys_do_not_open_pages_as_bearer_tokens(
    anonymous: TestClient, federation: Federation
) -> None:
    for who in ("admin", "A"):
        response = anonymous.get("/admin/", headers=federation.headers(who), follow_redirects=False)
        assert response.status_code == 303


def test_a_participant_key_is_refused_at_sign_in(
    anonymous: TestClient, federation: Federation
) -> None:
    token = csrf_of(anonymous.get("/admin/login").text)
    response = anonymous.post(
        "/admin/login", data={"csrf_token": token, "key": federation.keys["A"]}
    )
    assert response.status_code == 403
    assert "the admin UI opens only with the admin key" in response.text
    assert anonymous.get("/admin/", follow_redirects=False).status_code == 303


def test_an_unknown_key_is_refused_at_sign_in(anonymous: TestClient) -> None:
    token = csrf_of(anonymous.get("/admin/login").text)
    response = anonymous.post("/admin/login", data={"csrf_token": token, "key": "not-a-key"})
    assert response.status_code == 401
    assert anonymous.get("/admin/", follow_redirects=False).status_code == 303


def test_sign_in_without_csrf_token_is_403(anonymous: TestClient, federation: Federation) -> None:
    anonymous.get("/admin/login")
    response = anonymous.post("/admin/login", data={"key": federation.admin_key})
    assert response.status_code == 403
    assert anonymous.get("/admin/", follow_redirects=False).status_code == 303


def test_sign_in_never_redirects_off_the_admin_ui(anonymous: TestClient) -> None:
    token = csrf_of(anonymous.get("/admin/login").text)
    for target in ("https://evil.example/", "//evil.example/admin", "/v1/contracts"):
        response = anonymous.post(
            "/admin/login",
            data={"csrf_token": token, "key": "test-admin-key", "next": target},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/admin/", target
        token = csrf_of(anonymous.get("/admin/").text)


def test_posts_without_or_with_a_wrong_csrf_token_are_403_and_change_nothing(
    admin: TestClient, db_url: str
) -> None:
    before = registry_snapshot(db_url)
    for url in _protected("POST"):
        for data in ({"version": "1"}, {"csrf_token": "forged", "version": "1"}):
            response = admin.post(url, data=data)
            assert response.status_code == 403, (url, data)
    assert registry_snapshot(db_url) == before
    assert admin.get("/admin/", follow_redirects=False).status_code == 200


def test_sign_out_ends_the_session(admin: TestClient) -> None:
    token = csrf_of(admin.get("/admin/").text)
    response = admin.post("/admin/logout", data={"csrf_token": token}, follow_redirects=False)
    assert response.status_code == 303
    assert admin.get("/admin/", follow_redirects=False).status_code == 303


def test_rotating_the_admin_key_signs_sessions_out(admin: TestClient, settings: Settings) -> None:
    from app.main import create_app

    cookies: Any = admin.cookies
    rotated = TestClient(create_app(settings.model_copy(update={"admin_key": "rotated-key"})))
    rotated.cookies = cookies
    assert rotated.get("/admin/", follow_redirects=False).status_code == 303
    assert sign_in(rotated, "rotated-key").get("/admin/").status_code == 200
