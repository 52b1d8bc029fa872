"""Operations: Prometheus metrics at /metrics, a structured log line per request, request ids."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.auth.keys import same_secret
from app.errors import Unauthorized
from app.observability.logs import configure_logging
from app.observability.metrics import exposition
from app.observability.middleware import RequestObservability
from app.settings import Settings


def install(app: FastAPI, settings: Settings) -> None:
    """Add the request middleware and ``/metrics`` to ``app``; configure logging if asked."""
    if settings.log_format is not None:
        configure_logging(settings.log_format)
    app.add_middleware(RequestObservability)

    @app.get("/metrics", tags=["service"], include_in_schema=False)
    def metrics(request: Request) -> Response:
        """Prometheus text format. With FEDLOAD_METRICS_TOKEN set, only for that bearer token."""
        if settings.metrics_token is not None:
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not same_secret(given, settings.metrics_token):
                raise Unauthorized(
                    "/metrics needs 'Authorization: Bearer <FEDLOAD_METRICS_TOKEN>'",
                    field="Authorization",
                )
        body, content_type = exposition(app.state.session_factory, settings)
        return Response(body, media_type=content_type)
