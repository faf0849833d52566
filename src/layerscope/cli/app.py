"""The ``layerscope`` command: wiring only.

Each command lives in its own module of this package and exposes ``register(app)``. Command
modules import only typer at import time and import the library inside the command function,
so ``layerscope --help`` stays fast and never imports torch.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.abc
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence

import typer

from layerscope.cli.options import flush_deprecations
from layerscope.errors import LayerscopeError
from layerscope.units import reading_inputs

#: Command modules of this package, in help order, with the commands each registers (``tests/cli/test_app.py``
#: checks the lists against what the modules register).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "estimate": ("estimate",),
    "plan": ("plan",),
    "sweep": ("sweep",),
    "serving": ("serving", "serving-grid"),
    "catalogs": ("models", "hardware"),
    "simulate": ("simulate", "open"),
    "capture": ("capture",),
    "analyze": ("query", "analyze", "compare"),
    "demo": ("demo",),
    "validate": ("validate",),
    "calibrate": ("calibrate",),
    "records": ("workloads", "verify"),
    "report": ("report",),
}
_MODULE_OF = {command: module for module, commands in COMMAND_MODULES.items() for command in commands}


def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress to stderr."),
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def make_app(modules: Iterable[str] | None = None) -> typer.Typer:
    """The ``layerscope`` app with the commands of ``modules`` (default: every command module)."""
    application = typer.Typer(
        name="layerscope",
        help="Where the time goes when a transformer LM runs, and where it would go on other hardware.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    application.callback()(_root)
    for name in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(f"layerscope.cli.{name}").register(application)
    return application


def modules_for(args: Sequence[str]) -> tuple[str, ...] | None:
    """The command modules a command line needs: the one registering its command, or ``None`` (all of them)
    for the root help, no command, or a name no module registers (click then lists the commands).

    Building the app converts every registered command's signature into click parameters; for one command
    that is a few milliseconds, for all nineteen ~40 ms of each run (bench/RESULTS.md "whole process")."""
    for arg in args:
        if arg == "--help":  # the root's help, asked before any command: it lists them all
            return None
        if not arg.startswith("-"):
            module = _MODULE_OF.get(arg)
            return None if module is None else (module,)
    return None


def __getattr__(name: str) -> typer.Typer:
    """``app``: every command registered, built on first use (tests and documentation tools import it)."""
    if name == "app":
        application = make_app()
        globals()["app"] = application
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Longest error line printed: a message that quotes user input (a huge YAML value, a trace name)
#: is cut here, so an error never floods the terminal.
MAX_ERROR_CHARS = 500


def error_line(message: str) -> str:
    """``message`` as the one line ``error: …`` printed on stderr: whitespace runs (newlines too)
    collapsed, cut to :data:`MAX_ERROR_CHARS` with the cut marked."""
    text = " ".join(str(message).split())
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 30] + f" … ({len(text) - MAX_ERROR_CHARS + 30} more characters)"
    return f"error: {text}"


#: The cyclic collector's first-generation threshold in a ``layerscope`` process (CPython's default: 700). A
#: command's start allocates hundreds of thousands of objects that live to the end (modules, classes, pydantic
#: validators, the op graph) and that the default collector traverses again and again: 50 ms of a 0.5 s
#: ``estimate`` (bench/RESULTS.md "whole process"). Cycles are still collected, every 100,000 allocations.
GC_THRESHOLD_0 = 100_000


#: Packages a command module's process never uses although a dependency would import them: pyarrow's and DuckDB's
#: Python layers import pandas (0.4-0.7 s of CPU) only to ask whether an object handed to them is a DataFrame, and
#: the trace commands hand them Arrow tables and NumPy arrays only. While such a command runs, importing one of
#: these raises ``ModuleNotFoundError``, which both libraries take as "not installed".
NOT_IMPORTED: dict[str, tuple[str, ...]] = {"analyze": ("pandas",)}


class _Refuse(importlib.abc.MetaPathFinder):
    """A finder that refuses ``names`` (and their submodules) as not installed."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not used by this layerscope command)",
                                      name=fullname)


@contextlib.contextmanager
def _not_imported(modules: tuple[str, ...] | None) -> Iterator[None]:
    """:data:`NOT_IMPORTED` for ``modules`` while the command runs (none that is loaded already; removed after)."""
    names = tuple(n for m in modules or () for n in NOT_IMPORTED.get(m, ()) if n not in sys.modules)
    if not names:
        yield
        return
    finder = _Refuse(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _process_setup() -> None:
    """What only a ``layerscope`` process does (never a program importing the library): the collector threshold
    above, and no scan of every installed distribution for pydantic plugins (our models are validated by
    pydantic itself; a user who wants plugins sets ``PYDANTIC_DISABLE_PLUGINS`` to an empty string)."""
    gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def main() -> None:
    """Console-script entry point: bad input (a :class:`LayerscopeError`, a usage error) becomes one
    line ``error: …`` on stderr and exit code 2; a command's own exit code is passed on."""
    _process_setup()
    try:
        # Without standalone mode click *returns* a command's exit code (typer.Exit(1) included)
        # instead of exiting with it: pass it on, or every "gaps found" exit would become 0.
        # Every input a loader reads is remembered, so no writer of this command overwrites one.
        modules = modules_for(sys.argv[1:])
        application = make_app(modules)
        with reading_inputs(), _not_imported(modules):
            code = application(standalone_mode=False)
        flush_deprecations()
    except LayerscopeError as exc:
        flush_deprecations(print_them=False)
        typer.echo(error_line(str(exc)), err=True)
        raise SystemExit(2) from None
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except typer.Exit as exc:
        flush_deprecations()
        raise SystemExit(exc.exit_code) from None
    except RecursionError:
        # The last line of defence for input nested deeper than any reader bounds (readers refuse
        # deep nesting themselves with a message naming the file).
        typer.echo(error_line("input is nested too deeply to read"), err=True)
        raise SystemExit(2) from None
    except MemoryError:
        typer.echo(error_line("out of memory: the input asks for more memory than this machine has"), err=True)
        raise SystemExit(2) from None
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]  # the help itself, as click prints it
            raise SystemExit(2) from None
        if _is_usage_error(exc):
            typer.echo(error_line(_usage_message(exc)), err=True)
            raise SystemExit(2) from None
        raise
    raise SystemExit(code if isinstance(code, int) else 0)


def _usage_message(exc: BaseException) -> str:
    """A usage error's message and where to read the command's options."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f"{message} (see '{path} --help')" if path else message


def _is_usage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a command-line usage error (an unknown option, a bad value).

    Click raises them as ``click.ClickException``; typer >= 0.29 vendors click and raises its own
    copy of the class (``typer._click.exceptions.ClickException``), which is not a subclass of
    click's, so the class is recognized by name in the exception's MRO."""
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__) and hasattr(exc, "show")
