"""The reference pages written from the code (``shared/docgen.py``) are current: docs/options.md lists every job
option of ``JobOptions`` and docs/settings.md every setting, as the code defines them now, and an option added to
the schema reaches the page with one regeneration."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from shared import docgen
from shared.options import JobOptions, ProcessorName, choices
from shared.settings import Settings
from tests.deploy.deployfiles import ROOT


def _option_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += _option_names(annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def test_the_committed_pages_are_what_the_code_generates() -> None:
    stale = docgen.stale_pages(ROOT / "docs")
    assert not stale, f"stale: {', '.join('docs/' + page for page in stale)}; regenerate with {docgen.REGENERATE}"


def test_the_options_page_has_a_row_for_every_job_option() -> None:
    page = (ROOT / "docs" / "options.md").read_text()
    names = _option_names(JobOptions)
    assert len(names) > 30
    assert not [name for name in names if f"| `{name}` |" not in page]


def test_the_options_page_says_what_every_processor_does() -> None:
    """The processor table is written by hand: a processor a job can name has its row, and no other is listed."""
    page = (ROOT / "docs" / "options.md").read_text()
    table = page[page.index("## Processors") : page.index("## From the command line")]
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert rows == set(choices(ProcessorName))


def test_the_settings_page_has_a_row_for_every_setting() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    assert not [name for name in Settings.model_fields if f"| `SWAPFARM_{name.upper()}` |" not in page]


def test_a_new_option_reaches_the_page_with_its_type_default_range_and_description() -> None:
    class Extended(JobOptions):
        sharpen_radius: int | None = Field(None, ge=1, le=9, description="Unsharp-mask radius in pixels")

    row = next(line for line in docgen.options_markdown(Extended).splitlines() if "`sharpen_radius`" in line)
    assert row == "| `sharpen_radius` | integer or null | `null` | [1, 9] | Unsharp-mask radius in pixels |"


def test_a_new_setting_reaches_the_page_as_its_environment_variable() -> None:
    class Extended(Settings):
        stitch_threads: float = Field(2.5, gt=0, le=64, description="Threads of one stitch")

    rows = docgen.settings_markdown(Extended).splitlines()
    assert "| `SWAPFARM_STITCH_THREADS` | number | `2.5` | (0, 64] | Threads of one stitch |" in rows


def test_the_hand_written_prose_around_the_tables_is_kept(tmp_path: Path) -> None:
    page = tmp_path / "options.md"
    page.write_text(f"# Job options\n\nWritten by hand.\n\n{docgen.BEGIN}\nold table\n{docgen.END}\n\n## Trim\nKept.\n")
    regenerated = docgen.render("options.md", page.read_text())
    assert regenerated.startswith("# Job options\n\nWritten by hand.\n\n")
    assert regenerated.endswith(f"{docgen.END}\n\n## Trim\nKept.\n")
    assert "old table" not in regenerated
    assert "| `face.detector` |" in regenerated


def test_a_page_without_its_markers_is_refused_not_overwritten() -> None:
    with pytest.raises(docgen.StalePage, match="docs/options.md has no"):
        docgen.render("options.md", "# Job options\n\nno markers\n")
