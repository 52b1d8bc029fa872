"""Admin actions, each behind a confirmation page and carried out by the existing services.

GET shows what will happen and a form; POST (signed-in admin + CSRF token) does it through the
same service function the REST API uses, so the audit entry, the rules (e.g. a contract's
lifecycle) and the transaction boundary are the API's. The session is committed at the edge by
the ``SessionDep`` dependency before the redirect is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.admin.rendering import render
from app.admin.security import AdminForm, AdminSession
from app.auth.dependencies import SessionDep
from app.auth.principal import ADMIN
from app.contracts import service as contracts
from app.errors import InvalidInput
from app.models import ParticipantStatus
from app.participants import service as participants
from app.tasks import service as tasks

router = APIRouter()


@dataclass(frozen=True)
class Confirmation:
    title: str
    consequence: str
    button: str
    danger: bool
    cancel: str
    hidden: dict[str, str]


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _done(request: Request, message: str, to: str) -> Response:
    request.session["flash"] = message
    return RedirectResponse(to, status_code=303)


def _confirm(request: Request, c: Confirmation) -> Response:
    return render(request, "confirm.html", {"c": c})


PARTICIPANT_VERBS = {
    "suspend": (
        ParticipantStatus.suspended,
        "Its API key will be refused and the market will send it no more tasks. "
        "Tasks it hosts stay where they are.",
    ),
    "reinstate": (ParticipantStatus.active, "Its API key will be accepted again."),
}


def _participant_verb(verb: str) -> tuple[ParticipantStatus, str]:
    if verb not in PARTICIPANT_VERBS:
        raise InvalidInput(f"unknown action {verb!r}: suspend or reinstate", field="action")
    return PARTICIPANT_VERBS[verb]


@router.get("/participants/{name}/{verb}")
def confirm_participant(
    request: Request, name: str, verb: str, _: AdminSession, session: SessionDep
) -> Response:
    consequence = _participant_verb(verb)[1]
    participant = participants.get_participant(session, name)
    return _confirm(
        request,
        Confirmation(
            title=f"{verb.capitalize()} participant {participant.name}?",
            consequence=consequence,
            button=verb.capitalize(),
            danger=verb == "suspend",
            cancel=f"{_root(request)}/participants/{participant.name}",
            hidden={},
        ),
    )


@router.post("/participants/{name}/{verb}")
def do_participant(
    request: Request,
    name: str,
    verb: str,
    form: AdminForm,
    admin: AdminSession,
    session: SessionDep,
) -> Response:
    status, _consequence = _participant_verb(verb)
    participant = participants.set_status(session, name, status, actor=admin.actor)
    return _done(
        request,
        f"participant {participant.name} is now {participant.status.value}",
        f"{_root(request)}/participants/{participant.name}",
    )


@router.get("/contracts/{contract_id}/terminate")
def confirm_terminate(
    request: Request, contract_id: int, _: AdminSession, session: SessionDep
) -> Response:
    read = contracts.to_read(session, contracts.get_visible(session, ADMIN, contract_id))
    return _confirm(
        request,
        Confirmation(
            title=f"Terminate contract #{read.id} between {read.proposer} and {read.partner}?",
            consequence=(
                "No more load moves under it, its open offers are withdrawn and its ledger is "
                "settled now. Tasks already moved under it stay where they are."
            ),
            button="Terminate contract",
            danger=True,
            cancel=f"{_root(request)}/contracts/{read.id}",
            # The version seen here: if the contract changes meanwhile, the service refuses (409).
            hidden={"version": str(read.version)},
        ),
    )


@router.post("/contracts/{contract_id}/terminate")
def do_terminate(
    request: Request, contract_id: int, form: AdminForm, admin: AdminSession, session: SessionDep
) -> Response:
    raw = form.get("version", "")
    if not raw.isdigit():
        raise InvalidInput("version must be the contract version you confirmed", field="version")
    contract = contracts.terminate(session, admin, contract_id, int(raw))
    return _done(
        request,
        f"contract #{contract.id} terminated; settled {contract.settled_amount or 0:.4f}",
        f"{_root(request)}/contracts/{contract.id}",
    )


def _pin_verb(verb: str) -> bool:
    if verb not in ("pin", "unpin"):
        raise InvalidInput(f"unknown action {verb!r}: pin or unpin", field="action")
    return verb == "pin"


@router.get("/tasks/{name}/{verb}")
def confirm_pin(
    request: Request, name: str, verb: str, _: AdminSession, session: SessionDep
) -> Response:
    pinned = _pin_verb(verb)
    task = tasks.get_visible(session, ADMIN, name)
    return _confirm(
        request,
        Confirmation(
            title=f"{verb.capitalize()} task {task.name}?",
            consequence=(
                "The market will not offer or move it (failover still may)."
                if pinned
                else "The market may move it again."
            ),
            button=verb.capitalize(),
            danger=False,
            cancel=f"{_root(request)}/tasks/{task.name}",
            hidden={},
        ),
    )


@router.post("/tasks/{name}/{verb}")
def do_pin(
    request: Request,
    name: str,
    verb: str,
    _: AdminForm,
    admin: AdminSession,
    session: SessionDep,
) -> Response:
    task = tasks.set_pinned(session, name, _pin_verb(verb), actor=admin.actor)
    return _done(
        request,
        f"task {task.name} {'pinned' if task.pinned else 'unpinned'}",
        f"{_root(request)}/tasks/{task.name}",
    )
