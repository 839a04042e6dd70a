"""The docs the code cites are in the repository: a module that says "see docs/MODELS.md §5" or names a test or a
benchmark points at a file that exists, and docs/MODELS.md has the facts of every model the registry lists."""

from __future__ import annotations

import re

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
