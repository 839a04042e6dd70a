"""Lists and records on the terminal, for people and for scripts.

* ``--json`` prints one JSON document on stdout (:func:`print_json`), at any width.
* Otherwise a table, when every column fits the width at its natural size (a pipe counts as 80 columns, or
  ``$COLUMNS``); nothing in it is cut.
* When the table does not fit, one record per row (:func:`show`): the row's identifiers and short values on its
  first line, never cut or wrapped (a job id or model name is what the next command takes), then each long value
  on a line of its own below, wrapped at the width.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text
_INDENT = 2


@dataclass(frozen=True)
class Column:
    """A column of a listing. ``inline``: on a record's first line (identifiers and short values); ``labelled``:
    shown there as ``header value`` (for a bare number that would say nothing on its own)."""

    header: str
    inline: bool = False
    labelled: bool = False


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (dates as ISO 8601 text)."""
    typer.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def _table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], title: str | None) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column.header, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*(_text(cell) for cell in row))
    return table


def show(
    console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *, title: str | None = None
) -> None:
    """Print ``rows`` as a table when it fits ``console``'s width whole, else as records (see the module)."""
    table = _table(columns, rows, title)
    natural = console.measure(table, options=console.options.update_width(1 << 20)).maximum
    if natural <= console.width:
        console.print(table)
        return
    if title:
        console.print(Text(title, style="bold"))
    for row in rows:
        first = Text()
        for column, cell in zip(columns, row, strict=True):
            text = _text(cell)
            if not column.inline or not text.plain:
                continue
            if first.plain:
                first.append("  ")
            if column.labelled:
                first.append(f"{column.header} ")
            first.append_text(text)
        console.print(first, soft_wrap=True)  # soft: rich inserts no line break; identifiers stay whole
        for column, cell in zip(columns, row, strict=True):
            text = _text(cell)
            if column.inline or not text.plain:
                continue
            line = Text(f"{column.header}: ", style="dim")
            line.append_text(text)
            for wrapped in line.wrap(console, max(console.width - _INDENT, 20)):
                console.print(Text(" " * _INDENT) + wrapped, soft_wrap=True)
