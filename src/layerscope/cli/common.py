"""Helpers shared by the command modules: JSON output and rich tables.

Text from data (trace event names, SQL results, model and file names) must print as it is: the
console never turns ``:x:`` into an emoji, and markup (``[bold]``) is for a command's own styling
only. Data goes into a markup string through :func:`esc`, or into a table as :func:`text`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, Literal

# What json.dumps writes for an exact float and int (its encoder calls these, not a subclass's __repr__).
_float_repr = float.__repr__
_int_repr = int.__repr__


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    from layerscope.units import json_value

    return json_value(value)  # numbers, text, dates, decimals, UUIDs, bytes, enums, arrays; else TypeError


def to_json_text(obj: Any, indent: int | None = None) -> str:
    """``obj`` as strict JSON text (NaN/inf become null); the types :func:`print_json` knows."""
    return json.dumps(_clean(obj), default=_default, indent=indent, allow_nan=False)


def _clean(value: Any) -> Any:
    if hasattr(value, "model_dump"):  # a result model: its JSON dump, cleaned as any dict
        value = value.model_dump(mode="json")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (NaN/inf become null, so the output is strict JSON)."""
    sys.stdout.write(_indented_json(obj) + "\n")
    sys.stdout.flush()


class _NotPlain(Exception):
    """A value :func:`_indented` leaves to ``json.dumps``: not exactly a str, float, int, bool, None, dict with
    str keys, list or tuple."""


def _indented_json(obj: Any) -> str:
    """``to_json_text(obj, indent=2)``, byte for byte: the stdlib encoder is pure Python when it indents (a
    generator per level, ~3x slower than this on an estimate's 500 kB), and the NaN pass walks it all again.
    Anything but plain JSON types goes the stdlib's way."""
    value = obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj
    try:
        return _indented(value, "\n")
    except (_NotPlain, RecursionError):
        return to_json_text(obj, indent=2)


def _indented(value: Any, newline: str) -> str:
    """``value`` as ``json.dumps(_clean(value), indent=2)`` writes it at the indent of ``newline``."""
    kind = type(value)
    if kind is str:
        return _json_str(value)
    if kind is float:
        return _float_repr(value) if math.isfinite(value) else "null"
    if kind is int:
        return _int_repr(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is dict:
        if not value:
            return "{}"
        inner = newline + "  "
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            if type(item) is str:  # the common leaves inline: no call per field
                items.append(_json_str(key) + ": " + _json_str(item))
            elif type(item) is float and math.isfinite(item):
                items.append(_json_str(key) + ": " + _float_repr(item))
            else:
                items.append(_json_str(key) + ": " + _indented(item, inner))
        return "{" + inner + ("," + inner).join(items) + newline + "}"
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = newline + "  "
        return "[" + inner + ("," + inner).join([_indented(item, inner) for item in value]) + newline + "]"
    raise _NotPlain


def console() -> Any:
    """A rich console; when output is not a terminal, wide enough that tables don't wrap.

    Emoji codes are never replaced (an op named ``:x:`` prints as ``:x:``); markup is on, for the
    command's own styling: pass data through :func:`esc` or :func:`text`."""
    from rich.console import Console

    con = Console(emoji=False)
    return con if con.is_terminal else Console(width=200, emoji=False)


def esc(value: Any) -> str:
    """``value`` as a string that rich markup prints literally (``[/bold]`` stays ``[/bold]``)."""
    from rich.markup import escape

    return escape(str(value))


def text(value: Any, style: str = "") -> Any:
    """``value`` as a :class:`rich.text.Text`: printed literally (no markup, no emoji), in ``style``."""
    from rich.text import Text

    return Text(str(value), style=style)


def fmt_si(value: float, unit: str = "") -> str:
    """1.23e9 -> '1.23 G' + unit."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


def fmt_time_s(seconds: float) -> str:
    """Seconds in the most readable unit (chosen by magnitude: a negative time keeps its sign; ``units``)."""
    from layerscope.units import readable_seconds

    return readable_seconds(seconds)


#: The sign convention printed under every table with an error column.
ERROR_SIGN = "error = (predicted − measured) / measured: negative when the prediction is too fast"


def parse_threads(value: str) -> int | Literal["auto"]:
    """``--threads``: ``auto`` or a positive count."""
    import typer

    if value == "auto":
        return "auto"
    try:
        count = int(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r}: use auto or a thread count", param_hint="--threads") from None
    if count < 1:
        raise typer.BadParameter(f"{count}: must be >= 1 (or auto)", param_hint="--threads")
    return count


class progress_bar:
    """A progress bar on stderr while a long command runs (none when ``enabled`` is false or stderr is no tty);
    entering gives a ``progress(share)`` callback, or None."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def __enter__(self) -> Any:
        import sys

        if not (self.enabled and sys.stderr.isatty()):
            return None
        from rich.progress import Progress

        self.bar = Progress(transient=True, console=None)
        self.bar.start()
        task = self.bar.add_task("simulating", total=1.0)
        return lambda share: self.bar.update(task, completed=share)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def verbose() -> bool:
    """Whether the run was asked to say more (``layerscope -v``: the root logger at INFO or below)."""
    return logging.getLogger().getEffectiveLevel() <= logging.INFO


#: Third-party loggers a plain run keeps to errors: their warnings are about their own internals, not the run.
QUIET_LOGGERS = ("transformers", "torch", "accelerate", "huggingface_hub", "urllib3", "filelock")


@contextmanager
def quiet_third_party() -> Iterator[None]:
    """While the block runs, keep other libraries' warnings off stderr unless ``-v``: Python warnings are ignored,
    the :data:`QUIET_LOGGERS` log errors only, and transformers is told the same before it loads; with ``-v`` Python
    warnings are logged (``WARNING py.warnings: …``). Our own warnings (``warning: …`` lines, ``WARNING
    layerscope…`` records) are not touched; the profiler's native lines go to the log at INFO
    (:mod:`layerscope.capture.quiet`). Everything is as before once the block ends."""
    import warnings

    loud = verbose()
    env = {"TRANSFORMERS_VERBOSITY": "error", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    saved_env = {name: os.environ.get(name) for name in env}
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    saved_levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        if loud:
            logging.captureWarnings(True)
        else:
            warnings.simplefilter("ignore")
            for name, value in env.items():
                os.environ.setdefault(name, value)
            for lg in loggers:
                lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            if loud:
                logging.captureWarnings(False)
            for name, before in saved_env.items():
                if before is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = before
            for lg, level in zip(loggers, saved_levels, strict=True):
                lg.setLevel(level)


@contextmanager
def step_progress(enabled: bool, name: str) -> Iterator[Any]:
    """A progress bar on stderr for a run that reports ``progress(done, total, label)`` as each step starts
    (:mod:`layerscope.capture.progress`): ``name``, the bar, done of total, elapsed time and the step running.

    Yields the callback, or None when ``enabled`` is false (``--json``) or stderr is no terminal. The bar starts at
    the first report (a request refused before it prints its one error line alone), redraws only when told (no
    refresh thread takes the interpreter while something is timed) and leaves nothing behind."""
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True, auto_refresh=False)
    task: TaskID | None = None

    def progress(done: int, total: int, label: str) -> None:
        nonlocal task
        if task is None:
            task = bar.add_task(label, total=total, completed=done)
            bar.start()
        bar.update(task, completed=done, total=total, description=label, refresh=True)

    try:
        yield progress
    finally:
        if task is not None:
            bar.stop()
