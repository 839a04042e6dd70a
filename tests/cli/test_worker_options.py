"""``swapfarm worker`` refuses options it cannot honour before it connects to anything: the worker is Celery's,
built from these options by the command itself (not through Celery's own command line, which would check them)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--pool", "forked"], "--pool 'forked': one of prefork"),
        (["--tag", "Studio A"], "--tag 'Studio A': lower-case letters"),
    ],
)
def test_the_worker_refuses_an_unknown_pool_or_a_malformed_tag(args: list[str], said: str) -> None:
    result = CliRunner().invoke(app, ["worker", *args])
    assert result.exit_code == 2
    assert said in " ".join(result.output.split()), result.output
