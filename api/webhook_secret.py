"""``/v1/webhooks``: the caller's webhook signing secret (a submitted ``callback_url`` is checked by
``shared.submission.submit``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.auth import Caller
from api.schemas import error_responses
from shared.settings import Settings
from shared.webhooks import signing_secret

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
