"""IPv6 addresses that carry an IPv4 one (IPv4-compatible and -mapped, SIIT, NAT64, 6to4, Teredo) are judged by
the IPv4 address they carry, by the one check that runs at submission (through the API, both bodies) and before
each delivery (literal or DNS answer alike): a network that translates them would connect to that IPv4 address."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.errors import CallbackUrlError
from shared.models import utcnow
from shared.settings import Settings
from shared.webhooks import Claim, check_callback_url
from tests.support.tenants import bearer, make_key
from workers.webhook_delivery import attempt

# (address, what it stands for): every one of them reaches a host that is not public where it is translated.
FORBIDDEN = [
    ("::127.0.0.1", "IPv4-compatible loopback"),
    ("::a9fe:a9fe", "IPv4-compatible cloud metadata"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:a9fe:a9fe", "IPv4-mapped cloud metadata"),
    ("::ffff:0:7f00:1", "SIIT-translated loopback"),
    ("::ffff:0:a00:1", "SIIT-translated 10.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64 of the cloud metadata address"),
    ("64:ff9b::7f00:1", "NAT64 of loopback"),
    ("64:ff9b::c0a8:101", "NAT64 of 192.168.1.1"),
    ("64:ff9b:1::808:808", "NAT64 local-use prefix: where the IPv4 sits cannot be known"),
    ("64:ff9b:1:abcd::1", "NAT64 local-use prefix, any host"),
    ("2002:a9fe:a9fe::", "6to4 of the cloud metadata address"),
    ("2002:7f00:1::1", "6to4 of loopback"),
    ("2002:a00:1:1::1", "6to4 of 10.0.0.1"),
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo: a public server, the client 127.0.0.1"),
    ("2001:0:a00:1:8000:63bf:f7f7:f7f7", "Teredo: the server 10.0.0.1, a public client"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo: the client 192.0.2.45 (documentation)"),
]
PUBLIC = [
    ("64:ff9b::808:808", "NAT64 of 8.8.8.8"),
    ("2002:808:808::1", "6to4 of 8.8.8.8"),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "Teredo: server 65.54.227.120, client 8.8.8.8"),
    ("2606:4700:4700::1111", "a plain public IPv6 address"),
]


def _resolves_to(*addresses: str) -> object:
    def resolve(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolve


@pytest.mark.parametrize(("address", "why"), FORBIDDEN)
def test_the_check_sees_through_to_the_embedded_ipv4_address(address: str, why: str) -> None:
    for url, resolver in (
        (f"https://[{address}]/hook", _resolves_to()),  # a literal in the URL
        ("https://hooks.example.com/hook", _resolves_to("93.184.215.14", address)),  # one DNS answer among others
    ):
        with pytest.raises(CallbackUrlError) as refused:
            check_callback_url(url, production=True, resolve=resolver)  # type: ignore[arg-type]
        assert refused.value.code == "callback_url_forbidden", why


@pytest.mark.parametrize(("address", "why"), PUBLIC)
def test_an_embedded_public_address_passes(address: str, why: str) -> None:
    target = check_callback_url(f"https://[{address}]/hook", production=True)
    assert str(target.addresses[0]) == address, why


def test_an_operators_allowed_network_covers_the_addresses_that_embed_it() -> None:
    from ipaddress import ip_network

    allowed = [ip_network("10.0.0.0/8")]
    assert check_callback_url("http://[::ffff:10.0.0.7]:9000/", production=False, allowed=allowed).port == 9000
    with pytest.raises(CallbackUrlError):
        check_callback_url("http://[64:ff9b::7f00:1]/", production=False, allowed=allowed)


# -- through the API, and at delivery ----------------------------------------------------------------------


@pytest.fixture(params=["development", "production"])
def api(request: pytest.FixtureRequest, settings: Settings) -> Iterator[tuple[TestClient, Settings]]:
    live = Settings.model_validate(settings.model_dump() | {"environment": request.param, "secret_key": "s" * 32})
    with TestClient(create_app(live)) as client:
        client.headers.update(bearer(make_key(settings)))
        yield client, live


def _url(settings: Settings, address: str) -> str:
    # The issue's own examples are plain http (accepted outside production); production takes https only.
    scheme = "https" if settings.environment == "production" else "http"
    return f"{scheme}://[{address}]:6379/latest/meta-data/"


def test_submissions_naming_such_addresses_are_refused_by_both_bodies(
    api: tuple[TestClient, Settings], clip_short: Path
) -> None:
    client, settings = api
    for address, why in FORBIDDEN:
        url = _url(settings, address)
        refused = client.post("/v1/jobs", json={"target": {"url": "s3://media/clip.mp4"}, "callback_url": url})
        assert refused.status_code == 422, (why, refused.text)
        assert refused.json()["error"]["code"] == "callback_url_forbidden", why
        uploaded = client.post(
            "/v1/jobs",
            files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
            data={"options": json.dumps({"processors": ["passthrough"]}), "callback_url": url},
        )
        assert uploaded.status_code == 422, (why, uploaded.text)
        assert uploaded.json()["error"]["code"] == "callback_url_forbidden", why
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_a_submission_naming_an_embedded_public_address_is_accepted(
    api: tuple[TestClient, Settings], clip_short: Path
) -> None:
    client, settings = api
    accepted = client.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={
            "options": json.dumps({"processors": ["passthrough"]}),
            "callback_url": _url(settings, "64:ff9b::808:808"),
        },
    )
    assert accepted.status_code == 202, accepted.text


@pytest.mark.parametrize(("address", "why"), FORBIDDEN)
def test_delivery_refuses_them_too_without_connecting(address: str, why: str, settings: Settings) -> None:
    """A URL stored before this check existed (or by any other way) is checked again at each attempt."""
    claim = Claim(
        id="d" * 32, job_id="j" * 32, tenant_id=None, event_type="job.succeeded", url=f"http://[{address}]:6379/",
        payload={}, attempt=1, token="t", created_at=utcnow(),
    )  # fmt: skip
    outcome = attempt(claim, settings)
    assert not outcome.ok and outcome.code == "callback_url_forbidden", (why, outcome)
