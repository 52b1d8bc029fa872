"""/v1/dataplane: tokens for agents' Flight calls (issue 14, item 5), and the key verifying them.

Every Flight call between agents carries a token from here; the agents' Flight servers verify it
with the public key (``GET /v1/dataplane/key``) and refuse a call it does not cover. Who may ask
for which token is ``app.dataplane.service``'s rule, from the registry's records.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api_route import api_router
from app.auth.dependencies import CurrentPrincipal, SessionDep, SettingsDep
from app.dataplane import service
from app.dataplane.schemas import DataplaneKeyRead, TokenRead, TokenRequest
from app.db.base import utcnow

router = api_router(prefix="/v1/dataplane", tags=["data plane"])


async def signing_key(request: Request) -> service.SigningKey:
    key: service.SigningKey = request.app.state.dataplane_key
    return key


SigningKeyDep = Annotated[service.SigningKey, Depends(signing_key)]


@router.post("/tokens", response_model=TokenRead)
def issue_token(
    body: TokenRequest,
    me: CurrentPrincipal,
    session: SessionDep,
    settings: SettingsDep,
    key: SigningKeyDep,
) -> TokenRead:
    """A short-lived token for ``operations`` on one stream or one task's movement, addressed to
    the participant whose Flight endpoint serves them (``serving``).

    Streams (``<task>.out``, served by the task's owner): ``append``/``fence`` for the producing
    task's host or owner (or a prepared movement's target), ``read`` for them and every party of
    a consuming task, ``ack`` as ``consumer`` for that consumer's host. Tasks, for one movement:
    ``release`` for its target while prepared (served by the source), ``checkpoint`` for source
    or target while prepared (served by the target), ``reinstate`` for the target once aborted,
    ``retire`` once committed. An admin key gets ``read`` tokens only. 404 for a stream or
    movement the caller is no party to (as for an unknown one), 403 for an operation that is
    not the caller's; nothing is written."""
    return service.issue(
        session, me, body, key, now=utcnow(), ttl_seconds=settings.dataplane_token_seconds
    )


@router.get("/key", response_model=DataplaneKeyRead)
def dataplane_key(_: CurrentPrincipal, key: SigningKeyDep) -> DataplaneKeyRead:
    """The Ed25519 public key(s) agents verify data-plane tokens with (any key holder)."""
    return service.public_keys(key)
