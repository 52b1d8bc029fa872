"""The admin UI's read-only pages. Each one also serves its live region (``?partial=live``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from app.admin import availability as available
from app.admin import charts, figures, readmodels, reports
from app.admin.rendering import render
from app.admin.security import AdminSession, LoginForm, safe_next, sign_in, sign_out
from app.auth.dependencies import SessionDep, SettingsDep

router = APIRouter()


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


@router.get("/login")
def login_page(request: Request, next: str | None = None) -> Response:
    return render(request, "login.html", {"next": safe_next(next), "error": None})


@router.post("/login")
def login(request: Request, form: LoginForm, session: SessionDep) -> Response:
    sign_in(request, session, form.get("key", "").strip())
    return RedirectResponse(safe_next(form.get("next")), status_code=303)


@router.post("/logout")
def logout(request: Request, _: AdminSession, form: LoginForm) -> Response:
    sign_out(request)
    return RedirectResponse(f"{_root(request)}/login", status_code=303)


@router.get("/")
def overview(
    request: Request, _: AdminSession, session: SessionDep, settings: SettingsDep
) -> Response:
    return render(request, "overview.html", {"o": readmodels.overview(session, settings)})


@router.get("/allocation")
def allocation(
    request: Request, _: AdminSession, session: SessionDep, participant: str | None = None
) -> Response:
    return render(
        request,
        "allocation.html",
        {
            "tasks": readmodels.allocation(session, participant),
            "participant": participant or "",
            "names": readmodels.participant_names(session),
        },
    )


@router.get("/tasks/{name}")
def task(request: Request, name: str, _: AdminSession, session: SessionDep) -> Response:
    return render(request, "task.html", {"d": readmodels.task_detail(session, name)})


@router.get("/contracts")
def contracts(request: Request, _: AdminSession, session: SessionDep) -> Response:
    listed = readmodels.contract_list(session)
    names = readmodels.participant_names(session)
    return render(
        request,
        "contracts.html",
        {"contracts": listed, "graph": figures.graph(_root(request), names, listed)},
    )


@router.get("/contracts/{contract_id}")
def contract(request: Request, contract_id: int, _: AdminSession, session: SessionDep) -> Response:
    return render(request, "contract.html", {"d": readmodels.contract_detail(session, contract_id)})


@router.get("/movements")
def movements(request: Request, _: AdminSession, session: SessionDep) -> Response:
    moves = readmodels.movement_list(session)
    return render(
        request,
        "movements.html",
        {
            "moves": moves,
            "timeline": figures.moves_timeline(_root(request), moves),
            "counts": readmodels.reason_counts(moves),
        },
    )


@router.get("/participants/{name}")
def participant(
    request: Request, name: str, _: AdminSession, session: SessionDep, settings: SettingsDep
) -> Response:
    detail = readmodels.participant_detail(session, settings, name)
    return render(
        request,
        "participant.html",
        {
            "d": detail,
            "load_chart": figures.load_chart(detail),
            "mc_chart": figures.mc_chart(detail),
            "cost_curve": figures.cost_curve(detail),
        },
    )


@router.get("/replicas")
def replicas(
    request: Request, _: AdminSession, session: SessionDep, settings: SettingsDep
) -> Response:
    view = readmodels.replica_overview(session, settings)
    return render(
        request,
        "replicas.html",
        {
            "v": view,
            "per_participant": charts.count_bars(
                view.per_participant, label="replicas hosted per participant"
            ),
        },
    )


@router.get("/availability")
def availability(
    request: Request, _: AdminSession, session: SessionDep, settings: SettingsDep
) -> Response:
    view = available.availability(session, settings)
    return render(
        request,
        "availability.html",
        {
            "v": view,
            "timeline": figures.availability_timeline(_root(request), view),
            "window": f"{settings.heartbeat_interval_seconds:g} s x {settings.heartbeat_misses}",
        },
    )


@router.get("/audit")
def audit_log(request: Request, _: AdminSession, session: SessionDep) -> Response:
    return render(request, "audit.html", {"entries": readmodels.audit_log(session)})


@router.get("/reports")
def report_list(request: Request, _: AdminSession, settings: SettingsDep) -> Response:
    return render(
        request,
        "reports.html",
        {"reports": reports.list_reports(settings.reports_dir), "dir": settings.reports_dir},
    )


@router.get("/reports/{name}")
def report(request: Request, name: str, _: AdminSession, settings: SettingsDep) -> Response:
    return render(
        request, "report.html", {"report": reports.get_report(settings.reports_dir, name)}
    )


# A report's own HTML may come from anywhere that can write the reports directory: it is shown
# with scripts switched off and may load only its own images and styles.
REPORT_CSP = (
    "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
)


@router.get("/reports/{name}/files/{path:path}")
def report_file(
    request: Request, name: str, path: str, _: AdminSession, settings: SettingsDep
) -> Response:
    found, media_type = reports.resolve_file(settings.reports_dir, name, path)
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    if media_type.startswith(("text/html", "image/svg")):
        headers["Content-Security-Policy"] = REPORT_CSP
    return FileResponse(found, media_type=media_type, headers=headers)
