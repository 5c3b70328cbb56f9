"""The `mtia-trace` command line: a thin shell over the library, one module per command.

`main` is the only place that catches `MtiaTraceError`: it prints one line to stderr and returns
the error's exit code. Ctrl-C prints one line and exits 130; running out of memory or disk
space prints one line and exits 2. Any other exception is a bug and keeps its traceback.

Commands are registered lazily: `COMMANDS` names each command's module, which is imported only
when that command runs (or its own `--help` is asked for). `mtia-trace --help` and `--version`
import none of them, so they do not pay for pyarrow, DuckDB, pandas or matplotlib.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from mtia_trace import __version__
from mtia_trace.errors import MtiaTraceError
from mtia_trace.escape import TerminalStream

#: Every command, in the order `--help` lists them: (name, module in `mtia_trace.cli`, attribute,
#: summary). The attribute is a command function or a `typer.Typer` sub-app. The summary is the
#: first paragraph of the command's help (a test checks they match); `--help` lists it without
#: importing the module.
COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    ("inspect", "inspect_cmd", "inspect",
     "Summarise a trace: ranks, steps, streams, event kinds, top ops, collectives, warnings."),
    ("replay", "replay_cmd", "replay",
     "Replay a trace on target hardware and store the run (Parquet + run.json)."),
    ("validate", "validate_cmd", "validate",
     "Replay a trace as measured and compare it with the trace: step times and device starts."),
    ("query", "query_cmd", "query", "Run SQL over stored runs with DuckDB (read-only)."),
    ("analyze", "analyze_cmd", "analyze",
     "Run named analyses over a stored run and print their tables."),
    ("report", "report_cmd", "report",
     "Render one run: step time, attribution, top bottlenecks, analyzer tables, hardware used."),
    ("compare", "compare_cmd", "compare",
     "Compare two runs: per-component deltas and ratios, largest changes first."),
    ("sweep", "sweep_cmd", "sweep",
     "Replay a trace at every point of a grid of spec values; print and store step time and\n"
     "attribution (mean over ranks and steps, us) per point."),
    ("whatif", "whatif_cmd", "whatif",
     "Causal profile: the op groups that would shorten the step most if they were faster."),
    ("diff", "diff_cmd", "diff",
     "Causal diff of two traces of the same program (a regression, a config change)."),
    ("synth", "synth_cmd", "synth",
     "Generate synthetic DLRM-style training or inference traces, one Kineto file per rank."),
    ("export", "export_cmd", "export",
     "Export the replayed timeline for Perfetto (ui.perfetto.dev) or chrome://tracing."),
    ("hw", "hw_cmd", "app", "Hardware specs: list them, show one with sources and confidence."),
)


def _no_type(ctx: object = None) -> None:
    """An argument's type column in help: none."""


def _plain_metavar(param: Any, ctx: Any) -> None:
    """Help rows without Python types (``<list[str]>``, ``<int range>``): an option without a
    metavar gets one (N for integers, X for other numbers, PATH for paths, else its name in
    capitals); an argument shows its name only. Choices (``<text|json>``) are kept."""
    shown = param.display_type(ctx) if hasattr(param, "display_type") else None
    if not shown or "|" in shown:
        return
    if isinstance(param, typer.core.TyperArgument):
        if param.metavar is None and param.nargs == 1:
            param.metavar = param.name.upper()
        param.display_type_rich = _no_type  # type: ignore[method-assign]
        param._usage_display_name = lambda p=param: _usage_name(p)  # type: ignore[method-assign,misc]
        return
    if param.metavar is None:
        kind = shown.strip("<>").removesuffix(" range").removeprefix("list[").rstrip("]")
        param.metavar = {"int": "N", "float": "X", "path": "PATH", "Path": "PATH"}.get(
            kind, param.name.upper())


def _usage_name(param: Any) -> str:
    """An argument in the usage line as Unix usage writes it: ``TRACE``, ``[NAME]...`` (typer
    puts required ones in braces, ``{TRACE}``, which reads as literal braces)."""
    name = str(param.display_name_raw)
    if param.metavar is not None and (" " in name or "[" in name or name.endswith("...")):
        return name  # a metavar that spells out its own shape
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 and not name.endswith("...") else "")


def _plain_metavars(cmd: Any) -> None:
    ctx = typer.core._click.Context(cmd)  # type: ignore[attr-defined]
    for param in cmd.params:
        _plain_metavar(param, ctx)
    for sub in getattr(cmd, "commands", {}).values():
        _plain_metavars(sub)


#: Commands whose process has Arrow allocate from the system allocator (glibc), not its default
#: pool (mimalloc). A report decodes a stored run's columns once, then works beside them with
#: DuckDB and numpy, which allocate from the system allocator: there, the memory the Parquet
#: decoding frees is reused by what follows, where mimalloc would keep it resident for Arrow
#: alone (the MTIA training run's report: a peak 55 MB lower for Markdown, 65 MB for HTML, on
#: 57 MB of tables, and no slower). Arrow reads ``ARROW_DEFAULT_MEMORY_POOL`` once, when
#: pyarrow loads, so `load_command` sets it before it imports such a command (a pool the
#: environment names is kept).
SYSTEM_ALLOCATOR_COMMANDS = frozenset({"report"})


def load_command(name: str) -> Any:
    """Import the module of command `name` and build its click command."""
    _, module, attr, _ = next(c for c in COMMANDS if c[0] == name)
    if name in SYSTEM_ALLOCATOR_COMMANDS and "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    mod = importlib.import_module(f"mtia_trace.cli.{module}")
    target = getattr(mod, attr)
    if isinstance(target, typer.Typer):
        cmd = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False, rich_markup_mode=None)
        single.command(name)(target)
        cmd = typer.main.get_command(single)
    cmd.name = name
    cmd.context_settings.update(getattr(mod, "CONTEXT_SETTINGS", {}))
    _plain_metavars(cmd)
    return cmd


class _LazyCommands(MutableMapping[str, Any]):
    """The group's `commands` mapping: every name in `COMMANDS`, each loaded on first access."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.loaded:
            if name not in {c[0] for c in COMMANDS}:
                raise KeyError(name)
            self.loaded[name] = load_command(name)
        return self.loaded[name]

    def __setitem__(self, name: str, cmd: Any) -> None:
        self.loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([c[0] for c in COMMANDS])

    def __len__(self) -> int:
        return len(COMMANDS)


class LazyGroup(TyperGroup):
    """The root group: commands come from `COMMANDS`; the listing in `--help` loads none."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _LazyCommands()

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # every summary in full (wrapped by the formatter), never cut to the terminal width
        rows = [(name, " ".join(summary.split())) for name, _, _, summary in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mtia-trace {__version__}")
        raise typer.Exit(0)


app = typer.Typer(
    name="mtia-trace",
    cls=LazyGroup,
    help="Trace-driven profiler and bottleneck analyzer for recommender training on MTIA 300 and GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                 callback=_print_version, is_eager=True),
) -> None:
    """Trace-driven profiler and bottleneck analyzer for recommender training."""


#: The one line Ctrl-C prints (exit code 130, as shells report SIGINT).
INTERRUPTED = "mtia-trace: interrupted"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with `argv` (default: the process arguments); return the exit code.

    Usage errors are reported by typer (exit 2); `MtiaTraceError`s here, as one line; Ctrl-C
    (typer turns it into exit 130) as one line too.
    """
    saved = sys.stdout, sys.stderr
    for name in ("stdout", "stderr"):  # no name from a trace reaches a terminal raw
        stream = getattr(sys, name)
        isatty = getattr(stream, "isatty", None)
        if isatty is not None and isatty() and not isinstance(stream, TerminalStream):
            setattr(sys, name, TerminalStream(stream))
    try:
        return _run(argv)
    finally:
        sys.stdout, sys.stderr = saved


#: Bytes passed on the stack to grow it up front under an address-space limit (the stack grows
#: by one to two times this; at most a quarter of the stack limit is passed).
STACK_RESERVE = 2 * 2**20
_stack_reserved = False


def _reserve_stack() -> None:
    """Under an address-space limit (``ulimit -v``, RLIMIT_AS), grow the main thread's stack
    now. The stack grows on demand and each growth counts against that limit: once the heap has
    taken the rest, a native call that goes deeper than the stack has been so far (a sort, a
    decoder's recursion) is killed by SIGSEGV instead of raising MemoryError. Passing a struct
    by value through ctypes places it on the stack (about twice: the call and the callback's
    copy), which the kernel keeps mapped: tens of milliseconds, once per process, only under a
    limit. Raises `MemoryError` when the limit leaves no room for that (nothing could run)."""
    global _stack_reserved
    if _stack_reserved or not sys.platform.startswith("linux"):
        return
    import resource

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        _stack_reserved = True
        return
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    size = STACK_RESERVE if stack == resource.RLIM_INFINITY else min(STACK_RESERVE, stack // 4)
    # the block, up to twice it on the stack, the callback's copy, with room to spare
    if limit - _mapped_bytes() < 8 * size:
        raise MemoryError
    import ctypes

    class _Block(ctypes.Structure):
        _fields_ = [("b", ctypes.c_char * size)]

    ctypes.CFUNCTYPE(None, _Block)(lambda _b: None)(_Block())
    _stack_reserved = True


def _mapped_bytes() -> int:
    """The process's mapped address space (VmSize), what RLIMIT_AS bounds; 0 if unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _run(argv: list[str] | None) -> int:
    try:
        _reserve_stack()
        app(args=argv, prog_name="mtia-trace")
    except KeyboardInterrupt:  # raised outside typer's own handling (e.g. while it starts)
        typer.echo(INTERRUPTED, err=True)
        return 130
    except SystemExit as exc:
        if exc.code == 130:
            typer.echo(INTERRUPTED, err=True)
            return 130
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        typer.echo(str(exc.code), err=True)
        return 1
    except MtiaTraceError as exc:
        typer.echo(f"mtia-trace: error: {exc}", err=True)
        return exc.exit_code
    except MemoryError:
        typer.echo(f"mtia-trace: error: {OUT_OF_MEMORY}", err=True)
        return 2
    except ImportError as exc:
        if not _no_room_to_load(exc):
            raise
        typer.echo(f"mtia-trace: error: {OUT_OF_MEMORY}", err=True)
        return 2
    except OSError as exc:
        if exc.errno == errno.ENOMEM:  # the kernel's out of memory (an import's directory scan)
            typer.echo(f"mtia-trace: error: {OUT_OF_MEMORY}", err=True)
            return 2
        if not disk_full(exc):
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        typer.echo(f"mtia-trace: error: {where}{DISK_FULL}", err=True)
        return 2
    except Exception as exc:
        if not _no_room_for_thread(exc):  # Arrow's own error type, not imported here
            raise
        typer.echo(f"mtia-trace: error: {OUT_OF_MEMORY}", err=True)
        return 2
    return 0


def _no_room_to_load(exc: ImportError) -> bool:
    """Whether a library could not be loaded for want of address space (the loader's words
    when mmap fails under ``ulimit -v``: the libraries a command loads late, such as DuckDB's
    or Arrow's compute, are loaded once the memory is short)."""
    text = str(exc)
    return "failed to map segment from shared object" in text or \
        "cannot allocate memory" in text.lower()


def _no_room_for_thread(exc: BaseException) -> bool:
    """Whether Arrow could not start a worker thread (its stack no longer fits the address
    space under ``ulimit -v``: "Failed to launch worker thread: Resource temporarily
    unavailable")."""
    return type(exc).__module__.startswith("pyarrow") and \
        "Failed to launch worker thread" in str(exc)


#: The one line a `MemoryError` anywhere prints (or a library that no longer fits).
OUT_OF_MEMORY = ("out of memory; nothing was written. Free memory, raise the process's memory "
                 "limit, or give a smaller input (fewer ranks or steps)")
#: The one line a full disk (or quota) prints; writers leave nothing half-written behind.
DISK_FULL = ("no space left on device (or disk quota exceeded); nothing was written. Free "
             "space or write to another disk")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full; pyarrow's errors carry the
    errno only in their text."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text
