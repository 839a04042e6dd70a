"""The farm's own source files, parsed: what the tests of its structure walk (no module is imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "shared", "workers")


@dataclass(frozen=True)
class SourceFile:
    path: Path
    module: str  # dotted: ``shared.jobs``, ``workers.engines`` for a package's ``__init__``
    tree: ast.Module

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT)) if self.path.is_absolute() else str(self.path)


def source_files(packages: tuple[str, ...] = PACKAGES) -> Iterator[SourceFile]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield SourceFile(path, ".".join(parts), ast.parse(path.read_text(), filename=str(path)))
