"""The README stays a page for people: short, its first two commands real scripts, and every link it gives lands
on a docs page (and heading) that exists. The docs pages' own links are checked by the strict site build in
scripts/check; the README is not part of the site, so its links are checked here."""

from __future__ import annotations

import os
import re

from tests.deploy.deployfiles import ROOT

README = ROOT / "README.md"
BUDGET_BYTES = 6 * 1024
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) and GitHub give a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text)


def test_the_readme_fits_its_budget() -> None:
    size = len(README.read_bytes())
    assert size <= BUDGET_BYTES, f"README.md is {size} bytes; reference prose belongs in docs/"


def test_the_first_two_commands_are_the_scripts_they_name() -> None:
    block = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split()[0] for line in block.splitlines()]
    assert commands == ["scripts/demo", "scripts/test"]
    assert all(os.access(ROOT / command, os.X_OK) for command in commands)


def test_every_link_of_the_readme_lands_on_a_page_and_heading_that_exist() -> None:
    links = [link for link in _LINK.findall(README.read_text()) if not link.startswith(("http://", "https://"))]
    assert links, "the README links into docs/"
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file():
            broken.append(link)
        elif anchor:
            headings = [line.lstrip("#") for line in target.read_text().splitlines() if line.startswith("#")]
            if anchor not in {_slug(heading) for heading in headings}:
                broken.append(link)
    assert not broken


def test_the_readme_links_every_docs_page() -> None:
    linked = {link.partition("#")[0] for link in _LINK.findall(README.read_text())}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")} - {"docs/index.md"}  # the site's home
    assert not sorted(pages - linked)
