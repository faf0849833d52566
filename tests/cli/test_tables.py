"""The plain drawing of tables (layerscope/cli/tables.py) writes what rich writes to a non-terminal, byte for byte."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cli import tables
from layerscope.cli.tables import Line, Styled, Table, plain_text


@pytest.fixture(autouse=True)
def _no_rich_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich as a pipe sees it: no variable that makes it treat one as a terminal."""
    for name in tables._RICH_ENVIRON:
        monkeypatch.delenv(name, raising=False)


def rich_text(blocks: list[tables.Block]) -> str:
    """What rich writes for ``blocks`` to a stdout that is no terminal (the fallback of :func:`tables.emit`)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tables._emit_rich(blocks)
    return out.getvalue()


#: Characters the plain drawing takes (ASCII, markup and escapes, what the estimate prints) and ones it leaves
#: to rich (wide, combining, control and zero-width characters).
TAKEN = "ab Z09._-/:x%()[]=→·µ…αβ½×−┃"
LEFT = "\\漢\u0301\t\n\u200b\x1b"
TEXT = st.one_of(st.text(alphabet=TAKEN, max_size=14), st.text(alphabet=TAKEN + LEFT, max_size=14))
CELL = st.one_of(TEXT, st.builds(Styled, TEXT, st.sampled_from(["bold", "red", "yellow"])))


@st.composite
def blocks(draw: st.DrawFn) -> list[tables.Block]:
    out: list[tables.Block] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append(Line(*draw(st.lists(CELL, max_size=3))))
            continue
        t = Table(title=draw(st.one_of(st.just(""), TEXT, st.text(alphabet="ab ", min_size=60, max_size=90))))
        for header in draw(st.lists(TEXT, min_size=1, max_size=5)):
            t.add_column(header, justify=draw(st.sampled_from(["left", "right"])),
                         overflow=draw(st.sampled_from(["ellipsis", "fold"])))
        for _ in range(draw(st.integers(0, 4))):
            t.add_row(*(draw(CELL) for _ in t.columns))
        out.append(t)
    return out


@given(blocks())
@settings(max_examples=400, deadline=None)
def test_plain_text_is_what_rich_writes(drawn: list[tables.Block]) -> None:
    plain = plain_text(drawn)
    if plain is not None:
        assert plain == rich_text(drawn)


@given(st.lists(st.text(alphabet="abcXYZ019 .-/[]:→µ", min_size=1, max_size=30), min_size=2, max_size=6))
@settings(max_examples=100, deadline=None)
def test_a_table_that_fits_is_drawn_plain(cells: list[str]) -> None:
    t = Table(title="a title")
    for i in range(len(cells)):
        t.add_column(f"c{i}", justify="right" if i % 2 else "left")
    t.add_row(*cells)
    t.add_row(*reversed(cells))
    plain = plain_text([Line(Styled("x", "bold"), " y"), t])
    assert plain is not None and plain == rich_text([Line(Styled("x", "bold"), " y"), t])


def test_every_character_taken_is_one_cell_for_rich() -> None:
    from rich.cells import cell_len

    taken = [chr(c) for lo, hi in tables.ONE_CELL_RANGES for c in range(lo, hi + 1)
             if tables._one_cell_each(chr(c))]
    assert len(taken) > 1000 and "→" in taken and "µ" in taken
    assert [ch for ch in taken if cell_len(ch) != 1] == []
    assert not any(tables._one_cell_each(ch) for ch in "漢\u0301\t\n\u200b\x1b\u00ad")


def test_too_wide_goes_to_rich() -> None:
    t = Table(title="wide")
    t.add_column("a")
    t.add_row("x" * 197)
    assert plain_text([t]) is None  # 197 cells, 2 of padding, 2 edges: 201
    t.rows[0] = ("x" * 196,)
    assert plain_text([t]) == rich_text([t])
    assert plain_text([Line("y" * 201)]) is None and plain_text([Line("y" * 200)]) == "y" * 200 + "\n"


@pytest.mark.parametrize(("env", "tty", "encoding", "plain"), [
    ({}, False, "utf-8", True), ({}, True, "utf-8", False), ({"FORCE_COLOR": "1"}, False, "utf-8", False),
    ({"TTY_COMPATIBLE": "1"}, False, "utf-8", False), ({}, False, "ascii", False),
])
def test_plain_only_where_rich_writes_plain(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tty: bool,
                                            encoding: str, plain: bool) -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    monkeypatch.setattr(stream, "isatty", lambda: tty, raising=False)
    monkeypatch.setattr(sys, "stdout", stream)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert tables._plain_stdout() is plain


@pytest.mark.parametrize("args", [
    dict(model="llama-3.1-8b", hardware="h100-sxm"),
    dict(model="deepseek-v2-lite", hardware="mi300x", phase="generate", prompt_len=256, decode_steps=3),
    dict(model="qwen3-30b-a3b", hardware="h200", phase="prefill", batch=4, tensor_parallel=2, pipeline_parallel=2,
         micro_batches=2),
    dict(model="llama-3.1-405b", hardware="rtx-4090"),  # does not fit: "no", red on a terminal
])
def test_the_estimate_tables_are_drawn_plain(args: dict[str, object]) -> None:
    from layerscope.app.estimate import EstimateRequest, estimate
    from layerscope.app.requests import ParallelPlan, WorkloadRequest
    from layerscope.cli.estimate import _blocks

    workload = {k: args.pop(k) for k in ("phase", "batch", "prompt_len", "decode_steps") if k in args}
    parallel = {k: args.pop(k) for k in ("tensor_parallel", "pipeline_parallel", "micro_batches") if k in args}
    result = estimate(EstimateRequest(workload=WorkloadRequest(**workload), parallel=ParallelPlan(**parallel),
                                      **args))
    drawn = _blocks(result, 25)
    plain = plain_text(drawn)
    assert plain is not None and plain == rich_text(drawn)


@pytest.mark.parametrize("pieces", [("[", "a]"), ("[a", "]"), (Styled("x[", "bold"), "a]"), ("[", Styled("a]", "red")),
                                    ("[b", Styled("]", "red")), (Styled("[b", "red"), "]")])
def test_pieces_of_a_line_never_join_into_markup(pieces: tuple[tables.Cell, ...]) -> None:
    """Pieces escaped one by one could join into a tag (``"["`` + ``"a]"`` is ``[a]``, which rich would take as a
    style and print nothing): rich is given each run of unstyled pieces as one string, and prints the text."""
    text = "".join(p if isinstance(p, str) else p.text for p in pieces)
    assert rich_text([Line(*pieces)]) == plain_text([Line(*pieces)]) == text + "\n"
