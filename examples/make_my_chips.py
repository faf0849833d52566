"""Write ``examples/my_chips.xlsx``, the README's example spreadsheet, from the bundled device sheet.

The sheet is ``layerscope/hardware/presets/accelerators.csv``: the design notebook's device sheet
(``examples/seed-hardware-sheet.csv``, plain numbers in base units) with ``Description``, ``Kind``
and ``MACs_dtype`` rows and a ``Source`` column. Its cells go into the workbook as a spreadsheet
user types them (numbers as numbers), through the loaders' own XLSX writer. Run from anywhere:

    python examples/make_my_chips.py            # (re)write examples/my_chips.xlsx
    python examples/make_my_chips.py --check    # exit 1 if the committed file differs
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

from layerscope.hardware.loaders import SHEET_WRITERS
from layerscope.hardware.presets import bundled_spreadsheet_example

EXAMPLE = Path(__file__).resolve().parent / "my_chips.xlsx"


def _cell(text: str) -> Any:
    """A CSV cell as a spreadsheet holds it: ``2048`` an int, ``2500000000.0`` a float, else text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def example_grid() -> list[list[Any]]:
    """The rows of ``my_chips.xlsx``: the bundled device sheet with numbers as numbers."""
    with bundled_spreadsheet_example().open(encoding="utf-8", newline="") as handle:
        return [[_cell(text) for text in row] for row in csv.reader(handle)]


def read_grid(path: Path) -> list[list[Any]]:
    """The cell values of the first worksheet of ``path``."""
    import openpyxl

    workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        return [list(row) for row in workbook.worksheets[0].iter_rows(values_only=True)]
    finally:
        workbook.close()


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if not EXAMPLE.is_file() or read_grid(EXAMPLE) != example_grid():
            print(f"{EXAMPLE} is out of date; run: python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    SHEET_WRITERS[".xlsx"](example_grid(), EXAMPLE, ())
    print(f"wrote {EXAMPLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
