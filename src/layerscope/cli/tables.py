"""Tables and lines a command prints, drawn by rich on a terminal and as plain text elsewhere.

A command builds its output as data (:class:`Table`, :class:`Line`; text is literal, never markup) and hands
it to :func:`emit`. Where stdout is a terminal, rich draws it, in colour. Where it is not (a pipe, a file, a
test), the text rich would write there is drawn here without importing rich (~25 ms of a short command):
the same bytes, box-drawing characters and centred titles included. Output rich would lay out differently
(a table wider than :data:`PLAIN_WIDTH`, a character rich may not count as one cell, a non-UTF-8 stream)
goes to rich: the plain drawing is an exact copy of rich's output or not used at all
(``tests/cli/test_tables.py`` compares the two).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Literal

Justify = Literal["left", "right"]
Overflow = Literal["ellipsis", "fold"]

#: Line width of the output when stdout is not a terminal (tables don't wrap: :func:`layerscope.cli.common.console`).
PLAIN_WIDTH = 200

#: Environment variables with which rich may treat a non-terminal as a terminal (or size it): rich draws then.
_RICH_ENVIRON = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")

#: rich's HEAVY_HEAD box (``rich.box.HEAVY_HEAD``), the default of ``rich.table.Table``: top, header row,
#: header rule, body row, bottom; each as left, horizontal (or blank), divider, right.
_Box = tuple[str, str, str, str]
_TOP: _Box = ("┏", "━", "┳", "┓")
_HEAD: _Box = ("┃", " ", "┃", "┃")
_HEAD_RULE: _Box = ("┡", "━", "╇", "┩")
_BODY: _Box = ("│", " ", "│", "│")
_BOTTOM: _Box = ("└", "─", "┴", "┘")


class Styled:
    """``text`` printed in a rich ``style`` (``"bold"``, ``"red"``) on a terminal, and plain elsewhere."""

    __slots__ = ("style", "text")

    def __init__(self, text: str, style: str) -> None:
        self.text = text
        self.style = style


Cell = str | Styled


class Line:
    """One line of text: literal pieces, some of them styled."""

    __slots__ = ("pieces",)

    def __init__(self, *pieces: Cell) -> None:
        self.pieces = pieces


class Column:
    """A table column: its header, how its cells are justified, how a cell too wide for it is cut."""

    __slots__ = ("header", "justify", "overflow")

    def __init__(self, header: str, justify: Justify = "left", overflow: Overflow = "ellipsis") -> None:
        self.header = header
        self.justify: Justify = justify
        self.overflow: Overflow = overflow


class Table:
    """A titled table of literal cells (``rich.table.Table``'s defaults: heavy header, one space of padding)."""

    __slots__ = ("columns", "rows", "title")

    def __init__(self, title: str = "") -> None:
        self.title = title
        self.columns: list[Column] = []
        self.rows: list[tuple[Cell, ...]] = []

    def add_column(self, header: str, justify: Justify = "left", overflow: Overflow = "ellipsis") -> None:
        self.columns.append(Column(header, justify, overflow))

    def add_row(self, *cells: Cell) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append(cells)


Block = Line | Table


def emit(blocks: Iterable[Block]) -> None:
    """Print ``blocks`` on stdout, in order: as plain text where rich would draw no terminal output, else by rich."""
    blocks = list(blocks)
    text = plain_text(blocks) if _plain_stdout() else None
    if text is None:
        _emit_rich(blocks)
        return
    sys.stdout.write(text)
    sys.stdout.flush()


def _plain_stdout() -> bool:
    """Whether rich would write stdout as a plain, UTF-8, :data:`PLAIN_WIDTH`-wide file: no terminal, no
    notebook, no environment that tells rich otherwise."""
    out = sys.stdout
    if out is None or hasattr(out, "rich_proxied_file") or sys.platform == "win32" or "IPython" in sys.modules:
        return False
    if any(name in os.environ for name in _RICH_ENVIRON):
        return False
    isatty = getattr(out, "isatty", None)
    try:
        if isatty is None or isatty():
            return False
    except ValueError:  # a closed stream: rich's answer is "no terminal", but let rich say what it does
        return False
    return (getattr(out, "encoding", None) or "utf-8").lower().startswith("utf")


def plain_text(blocks: Sequence[Block]) -> str | None:
    """The text rich writes for ``blocks`` on a non-terminal :data:`PLAIN_WIDTH` wide, or None where its layout
    would differ from the plain one (a line or table wider, a character that is not one cell wide)."""
    out: list[str] = []
    for block in blocks:
        drawn = _plain_line(block) if isinstance(block, Line) else _plain_table(block)
        if drawn is None:
            return None
        out.append(drawn)
    return "".join(out)


def _one_cell_each(text: str) -> bool:
    """Whether every character of ``text`` is printable and one terminal cell wide for rich, and none is a
    backslash (which rich's markup escaping may print doubled: ``rich.markup.escape("a\\")``)."""
    if "\\" in text:
        return False
    if text.isascii():
        return text.isprintable()
    import unicodedata

    return all(
        (ch.isascii() and ch.isprintable())
        or (any(lo <= ord(ch) <= hi for lo, hi in ONE_CELL_RANGES) and ch.isprintable()
            and unicodedata.category(ch)[0] != "M" and unicodedata.east_asian_width(ch) not in "WF")
        for ch in set(text)
    )


#: Code points outside ASCII that may be one cell wide (each character is checked by :func:`_one_cell_each`):
#: Latin-1 and Latin Extended, Greek, general punctuation, letter-like symbols, arrows, mathematical operators,
#: box drawing. Not the symbol blocks whose widths change between Unicode versions (emoji).
ONE_CELL_RANGES = ((0xA0, 0x2FF), (0x370, 0x3FF), (0x2010, 0x205F), (0x2100, 0x22FF), (0x2500, 0x259F))


def _plain_line(line: Line) -> str | None:
    text = "".join(p if isinstance(p, str) else p.text for p in line.pieces)
    if len(text) > PLAIN_WIDTH or not _one_cell_each(text):
        return None
    return text + "\n"


def _plain_table(table: Table) -> str | None:
    columns = table.columns
    if not columns:
        return "\n"
    texts = [[c.header for c in columns]] + [[c if isinstance(c, str) else c.text for c in row] for row in table.rows]
    if not all(_one_cell_each(t) for row in texts for t in row) or not _one_cell_each(table.title):
        return None
    # Column width: its widest cell, one space each side (rich measures untrimmed text, then trims each cell).
    widths = [max(len(row[i]) for row in texts) + 2 for i in range(len(columns))]
    table_width = sum(widths) + len(columns) + 1
    if table_width > PLAIN_WIDTH:
        return None
    out: list[str] = []
    if table.title:
        title = table.title.rstrip()
        if len(title) > table_width:
            return None
        left = (table_width - len(title)) // 2
        out.append(" " * left + title + " " * (table_width - len(title) - left) + "\n")
    out.append(_rule(_TOP, widths))
    for index, row in enumerate(texts):
        left_edge, _, divider, right_edge = _HEAD if index == 0 else _BODY
        cells = []
        for text, width, column in zip(row, widths, columns, strict=True):
            text = text.rstrip()
            pad = " " * (width - 2 - len(text))
            cells.append(f" {pad}{text} " if column.justify == "right" else f" {text}{pad} ")
        out.append(left_edge + divider.join(cells) + right_edge + "\n")
        if index == 0:
            out.append(_rule(_HEAD_RULE, widths))
    out.append(_rule(_BOTTOM, widths))
    return "".join(out)


def _rule(box: _Box, widths: list[int]) -> str:
    left, horizontal, divider, right = box
    return left + divider.join(horizontal * w for w in widths) + right + "\n"


def _emit_rich(blocks: Sequence[Block]) -> None:
    """``blocks`` drawn by rich, on the console of :func:`layerscope.cli.common.console`."""
    from rich.table import Table as RichTable

    from layerscope.cli.common import console, esc

    con = console()
    for block in blocks:
        if isinstance(block, Line):
            con.print("".join(_markup(p) for p in _merged(block.pieces)))
            continue
        t = RichTable(title=esc(block.title) if block.title else None)
        for column in block.columns:
            t.add_column(esc(column.header), justify=column.justify, overflow=column.overflow)
        for row in block.rows:
            t.add_row(*(_markup(c) for c in row))
        con.print(t)


def _merged(pieces: Sequence[Cell]) -> list[Cell]:
    """``pieces`` with each run of unstyled ones joined: escaped one by one, ``"["`` and ``"a]"`` would join into
    the markup tag ``[a]`` (rich's escape only escapes a whole tag)."""
    out: list[Cell] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def _markup(cell: Cell) -> Any:
    """``cell`` as rich markup: its text escaped, in its style."""
    from layerscope.cli.common import esc

    if isinstance(cell, str):
        return esc(cell)
    return f"[{cell.style}]{esc(cell.text)}[/]"
