"""The SSRF rules of callback URLs (every resolved address checked) and the Standard Webhooks signature."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from ipaddress import ip_network

import pytest
from standardwebhooks import Webhook

from shared.errors import CallbackUrlError
from shared.webhooks import Resolver, RetryPolicy, check_callback_url, signed, signing_secret


def resolver(*addresses: str) -> Resolver:
    def resolve(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolve


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("https://127.0.0.1/hook", ()),
        ("https://169.254.169.254/latest/meta-data/", ()),  # cloud metadata: link-local
        ("https://[::1]/hook", ()),
        ("https://[::ffff:127.0.0.1]/hook", ()),  # loopback dressed as IPv6
        ("https://10.0.0.7/hook", ()),
        ("https://100.64.0.1/hook", ()),  # carrier-grade NAT: not public either
        ("https://0.0.0.0/hook", ()),
        ("https://hooks.example.com/x", ("93.184.215.14", "192.168.1.10")),  # one private address is enough
        ("https://rebind.example.com/x", ("fd00::1",)),
    ],
)
def test_addresses_that_are_not_public_are_forbidden(url: str, addresses: tuple[str, ...]) -> None:
    with pytest.raises(CallbackUrlError) as refused:
        check_callback_url(url, production=True, resolve=resolver(*addresses))
    assert refused.value.code == "callback_url_forbidden"


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",  # production: https only
        "https://user:pass@hooks.example.com/x",
        "ftp://hooks.example.com/x",
        "https:///nohost",
        "https://hooks.example.com/a b",
        "https://hooks.example.com:99999/x",
        "/relative",
    ],
)
def test_malformed_or_plain_http_urls_are_invalid_in_production(url: str) -> None:
    with pytest.raises(CallbackUrlError) as refused:
        check_callback_url(url, production=True, resolve=resolver("93.184.215.14"))
    assert refused.value.code == "callback_url_invalid"


def test_public_hosts_pass_and_the_connection_is_pinned_to_a_checked_address() -> None:
    target = check_callback_url(
        "https://hooks.example.com:8443/in?x=1",
        production=True,
        resolve=resolver("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"),
    )
    assert target.pinned_url() == "https://93.184.215.14:8443/in?x=1"
    assert target.host_header == "hooks.example.com:8443"


def test_a_host_whose_name_server_does_not_answer_is_invalid_after_the_lookup_time_and_others_still_resolve() -> None:
    answered = threading.Event()

    def silent(host: str, port: int) -> Sequence[str]:
        answered.wait(30)  # a name server that drops the query: the resolver's own retries take 10 s and more
        raise OSError("timed out")

    try:
        with pytest.raises(CallbackUrlError) as refused:
            check_callback_url("https://dropped.example.com/x", production=True, resolve=silent, resolve_timeout=0.05)
        assert refused.value.code == "callback_url_invalid"
        assert "did not resolve within 0.05 s" in refused.value.message
        # The hung lookup holds one thread, not the check of the next URL.
        target = check_callback_url("https://hooks.example.com/x", production=True, resolve=resolver("93.184.215.14"))
        assert target.pinned_url() == "https://93.184.215.14:443/x"
    finally:
        answered.set()


def test_the_operator_may_allow_a_private_network_and_plain_http_outside_production() -> None:
    allowed = [ip_network("127.0.0.0/8")]
    assert check_callback_url("http://127.0.0.1:9000/hook", production=False, allowed=allowed).port == 9000
    with pytest.raises(CallbackUrlError):
        check_callback_url("http://10.0.0.1/hook", production=False, allowed=allowed)


def test_a_signature_verifies_with_the_tenants_secret_and_no_other() -> None:
    secret = signing_secret("farm-secret", "tenant-a")
    assert secret != signing_secret("farm-secret", "tenant-b") != signing_secret("other", "tenant-a")
    body, headers = signed("abc123", {"type": "job.failed", "data": {"id": "j"}}, secret, datetime.now(UTC))
    assert headers["webhook-id"] == "msg_abc123"
    assert Webhook(secret).verify(body, headers)["type"] == "job.failed"
    with pytest.raises(Exception, match="signature"):
        Webhook(signing_secret("farm-secret", "tenant-b")).verify(body, headers)


def test_retries_back_off_doubling_up_to_the_cap() -> None:
    policy = RetryPolicy(base_seconds=5, max_seconds=60, retry_for_seconds=86400)
    delays = [policy.delay(n) for n in range(1, 8)]
    assert 4 <= delays[0] <= 5 and 8 <= delays[1] <= 10 and 16 <= delays[2] <= 20
    assert all(48 <= d <= 60 for d in delays[4:])
