"""``/v1/webhooks``: the caller's webhook signing secret; and the check of a submitted ``callback_url``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from api.auth import Caller
from api.schemas import error_responses
from shared.settings import Settings
from shared.webhooks import check_callback_url, signing_secret

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class WebhookSecret(BaseModel):
    secret: str = Field(
        description="Verify the `webhook-signature` of the farm's webhooks with it (Standard Webhooks, HMAC-SHA256)",
        examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )


@router.get("/secret", response_model=WebhookSecret, responses=error_responses())
def webhook_secret(request: Request, caller: Caller) -> WebhookSecret:
    """The secret the farm signs this tenant's webhooks with (``job.succeeded``, ``job.failed``,
    ``job.cancelled`` to a job's ``callback_url``). It changes only when the farm's secret key does."""
    settings: Settings = request.app.state.settings
    return WebhookSecret(secret=signing_secret(settings.secret_key.get_secret_value(), caller.tenant_id))


async def checked_callback(settings: Settings, url: str | None) -> str | None:
    """The submitted callback URL once it passed the SSRF check (its host is resolved: off the event loop).

    Raises:
        CallbackUrlError: refused (``callback_url_invalid``, ``callback_url_forbidden``).
    """
    if url is None:
        return None
    await run_in_threadpool(
        lambda: check_callback_url(
            url, production=settings.environment == "production", allowed=settings.webhook_allowed_networks
        )
    )
    return url
