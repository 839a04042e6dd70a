"""Every table the schema holds is named by the least-privilege roles' grants (``shared.schema``): a table added
without its grants leaves workers or the API denied at run time (a worker's claim reads farm_controls)."""

from __future__ import annotations

from shared.models import Base
from shared.schema import API_GRANTS, NO_ACCESS, WORKER_GRANTS


def test_every_table_is_granted_to_a_role_or_named_as_no_access() -> None:
    tables = set(Base.metadata.tables)
    named = set(WORKER_GRANTS) | set(API_GRANTS) | set(NO_ACCESS)
    assert tables - named == set(), "tables no role may touch: add their grants in shared/schema.py"


def test_the_farm_pause_is_read_by_workers_and_written_by_the_api() -> None:
    assert WORKER_GRANTS["farm_controls"] == "SELECT"
    assert {"SELECT", "INSERT", "UPDATE"} <= {r.strip() for r in API_GRANTS["farm_controls"].split(",")}
