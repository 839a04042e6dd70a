"""Schemathesis against ``/openapi.json`` of a running API server, with a valid key: generated requests for every
operation, checked by schemathesis' default checks (no server error; documented statuses, content types, headers
and bodies; auth enforced).

Bounded: a few derandomized examples per operation, so the run is quick and the same each time. Schemathesis'
coverage phase adds a case for each boundary of every property: about 2,800 for the job options alone. A group's
options are the same schema (``JobOptions``), parsed by the same function (``api.jobs._parse_options``) or the same
model, so their boundaries are sent through ``POST /v1/jobs`` only; ``POST /v1/groups`` gets every other case.
Those boundaries are split in two tests by a stable hash of each case, so that neither takes over half a minute.
(Those cases had also been the only ones to reach a group member refused by its own check, a random-bytes
target: ``tests/api/test_group_members.py`` holds that now.)

The description is read from a fixture (``schemathesis.pytest.from_fixture``): the cases, the coverage phase's
thousands among them, are generated when a test runs, each operation a subtest, not while pytest collects. Generated
while collecting, they took half of the CPU time that collecting the inner loop's tests took (20.0 against 10.1 s),
in every pytest process, whether it ran them or not.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.app import create_app
from shared.settings import Settings
from tests.support.live import LiveApi, live_api
from tests.support.tenants import bearer, make_key

EXAMPLES = 12


@pytest.fixture(scope="module")
def description() -> schemathesis.BaseSchema:
    """The description does not depend on settings: it is read from an app that is never started. The first test
    checks that the server serves this same description."""
    return schemathesis.openapi.from_dict(create_app().openapi())


fuzzed = schemathesis.pytest.from_fixture("description")


@pytest.fixture(autouse=True)
def _node_id_as_schemathesis_reads_it(request: pytest.FixtureRequest) -> None:
    """Schemathesis' lazy tests (4.32) read and rename ``request.node._nodeid``, which pytest 9 no longer has: the
    attribute it reads, given here, so each operation's subtest is named after it."""
    request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def server(
    database_url: str, broker_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveApi, str]]:
    """One API server for every operation; small upload limits keep generated uploads cheap to refuse, and a short
    lookup time the generated callback hosts (``0.com`` …) cheap to resolve or refuse: a name server that drops
    some of those queries would otherwise cost the resolver's 5-second retries each (most of this test's time)."""
    home = tmp_path_factory.mktemp("fuzz")
    settings = Settings(
        environment="test",
        database_url=database_url,
        broker_url=broker_url,
        storage_url=f"file://{home / 'storage'}",
        work_dir=home / "work",
        max_upload_bytes=64 * 1024,
        max_source_bytes=8 * 1024,
        webhook_resolve_timeout_seconds=0.02,
    )
    (home / "logs").mkdir()
    with live_api(settings, home / "logs") as api:
        yield api, make_key(settings)


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    """One keep-alive connection pool for every generated request (a connection each would double their cost)."""
    with requests.Session() as pool:
        yield pool


def test_the_server_serves_the_description_that_is_fuzzed(
    server: tuple[LiveApi, str], description: schemathesis.BaseSchema
) -> None:
    api, _ = server
    assert httpx.get(f"{api.url}/openapi.json").json() == description.raw_schema


def _job_options_boundary(case: schemathesis.Case) -> bool:
    """A coverage-phase case about a boundary inside the options object (its description names the path)."""
    description = str(getattr(case.meta.phase.data, "description", "")) if case.meta else ""
    return description.startswith(("options -> ", "Object with valid 'options' value"))


SETTINGS = hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
JOBS = {"method": "POST", "path": "/v1/jobs"}
UPLOADS = {("POST", "/v1/jobs"), ("POST", "/v1/groups")}


def _second_half(case: schemathesis.Case) -> bool:
    """Whether a boundary case of the job options is the second test's (a stable hash of what it describes and
    sends: the same split in every run)."""
    description = str(getattr(case.meta.phase.data, "description", "")) if case.meta else ""
    return zlib.crc32(f"{description}|{case.body!r}|{case.query!r}".encode()) % 2 == 1


def _answered_as_documented(case: schemathesis.Case, server: tuple[LiveApi, str], session: requests.Session) -> None:
    api, key = server
    # A schema cannot say "a decodable video": a schema-valid upload of random bytes is rightly refused (422).
    excluded = [positive_data_acceptance] if (case.method, case.path) in UPLOADS else []
    case.call_and_validate(base_url=api.url, headers=bearer(key), session=session, excluded_checks=excluded)


@pytest.mark.slow
@fuzzed.exclude(**JOBS).parametrize()
@SETTINGS
def test_the_api_answers_every_generated_request_as_documented(
    case: schemathesis.Case, server: tuple[LiveApi, str], session: requests.Session
) -> None:
    if (case.method, case.path) == ("POST", "/v1/groups") and _job_options_boundary(case):
        return  # sent through POST /v1/jobs (the module's docstring)
    _answered_as_documented(case, server, session)


@pytest.mark.slow
@fuzzed.include(**JOBS).parametrize()
@SETTINGS
def test_a_job_submission_is_answered_as_documented_with_half_of_the_options_boundaries(
    case: schemathesis.Case, server: tuple[LiveApi, str], session: requests.Session
) -> None:
    if _job_options_boundary(case) and _second_half(case):
        return  # the next test's
    _answered_as_documented(case, server, session)


@pytest.mark.slow
@fuzzed.include(**JOBS).parametrize()
@SETTINGS
def test_the_other_half_of_the_job_options_boundaries_is_answered_as_documented(
    case: schemathesis.Case, server: tuple[LiveApi, str], session: requests.Session
) -> None:
    if _job_options_boundary(case) and _second_half(case):
        _answered_as_documented(case, server, session)
