"""/v1/audit: the audit log, read-only."""

from __future__ import annotations

from fastapi import Query

from app.api_route import api_router
from app.audit import service
from app.audit.schemas import AuditEntryRead, AuditPageRead
from app.auth.dependencies import CurrentPrincipal, SessionDep

router = api_router(prefix="/v1/audit", tags=["audit"])

MAX_PAGE = 500


@router.get("", response_model=AuditPageRead)
def list_audit(
    principal: CurrentPrincipal,
    session: SessionDep,
    limit: int = Query(100, ge=1, le=MAX_PAGE, description="Entries per page."),
    cursor: int | None = Query(
        None, ge=1, le=2**31 - 1, description="The previous page's next_cursor."
    ),
) -> AuditPageRead:
    """The audit log, newest first: every entry for an admin, the entries about itself for a
    participant (its own actions and those touching its contracts, tasks, offers, movements
    and permits). Append-only and hash-chained; ``fedload audit verify`` checks the chains."""
    page = service.page_for(session, principal, limit=limit, before=cursor)
    return AuditPageRead(
        items=[
            AuditEntryRead(
                id=e.id,
                at=e.at,
                actor=e.actor,
                action=e.action,
                entity_type=e.entity_type,
                entity_id=e.entity_id,
                detail=e.detail,
                participants=page.subjects.get(e.id, []),
                chain=e.chain,
                prev_hash=e.prev_hash,
                hash=e.hash,
            )
            for e in page.entries
        ],
        next_cursor=page.next_cursor,
    )
