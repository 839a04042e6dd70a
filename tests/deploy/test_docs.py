"""The docs the code cites are in the repository: a module that says "see docs/MODELS.md §5" or names a test or a
benchmark points at a file that exists, docs/MODELS.md has the facts of every model the registry lists, and the
options page lists every processor."""

from __future__ import annotations

import re

from shared.options import ProcessorName, choices
from tests.deploy.deployfiles import ROOT
from workers.models.registry import REGISTRY

SOURCES = ("api", "cli", "shared", "workers")
_CITED = re.compile(r"\b((?:docs|tests|benchmarks)/[\w/.-]+\.(?:md|py))\b")


def test_every_file_a_module_cites_exists() -> None:
    cited = {
        (str(path.relative_to(ROOT)), match)
        for folder in SOURCES
        for path in (ROOT / folder).rglob("*.py")
        for match in _CITED.findall(path.read_text())
    }
    assert cited, "the modules cite docs/MODELS.md at least"
    missing = sorted((source, name) for source, name in cited if not (ROOT / name).exists())
    assert not missing


def test_docs_models_has_every_registered_model_file() -> None:
    models = (ROOT / "docs" / "MODELS.md").read_text()
    assert not [spec.file_name for spec in REGISTRY.values() if spec.file_name not in models]


def test_the_options_page_has_a_row_for_every_processor_a_job_can_name() -> None:
    page = (ROOT / "docs" / "options.md").read_text()
    table = page.split("## Processors", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)) == set(choices(ProcessorName))
