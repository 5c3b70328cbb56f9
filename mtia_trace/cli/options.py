"""Options shared by several commands, defined once so their help stays the same everywhere."""

from __future__ import annotations

from enum import Enum

import typer

TRACE_ARGUMENT = typer.Argument(
    ..., help="Kineto trace (.json / .json.gz) or a folder with one per rank.")
SET_OPTION = typer.Option(None, "--set", metavar="KEY=VALUE",
                          help="Override a spec value (repeatable).")
LOSS_RATE_OPTION = typer.Option(0.0, "--loss-rate", min=0.0, max=1.0,
                                help="Packet loss probability for retransmissions.")
#: Seeds are non-negative 63-bit integers (numpy's generators and the int64 run metadata).
SEED_MAX = 2**63 - 1
SEED_OPTION = typer.Option(0, "--seed", min=0, max=SEED_MAX, help="Seed for the loss draws.")
SOURCE_HW_OPTION = typer.Option(None, "--source-hw", help="Hardware the trace was measured on "
                                "(for --mode scaled; default: detected from deviceProperties).")
#: Earlier option spellings, still accepted but not listed in --help (one spelling per option:
#: ``-o/--output`` for where results go, ``--format`` without a short form).
OLD_OUT_OPTION = typer.Option(None, "--out", hidden=True, help="Old spelling of -o/--output.")
OLD_FORMAT_SHORT = "-f"

#: For commands that write one output file (report, export, compare -o).
QUIET_OPTION = typer.Option(False, "--quiet", "-q", help="No progress output on a terminal.")
FORCE_OPTION = typer.Option(False, "--force", help="Overwrite the output file if it exists.")
WHATIF_OPTION = typer.Option(
    None, "--whatif", metavar="SELECTOR:CHANGE",
    help="Op-level what-if applied to costs before scheduling (repeatable), e.g. "
         "'rank=3,kind=embedding,scope=*backward*:x0.5', 'name=aten::mm:-20%', "
         "'name=data_wait:=0us', 'kind=gemm:+5ms'. See docs/whatif.md.")


class PrintFormat(str, Enum):
    """How a command prints its result: text for people, json for machines."""

    text = "text"
    json = "json"


#: ``--format text|json`` for commands that print a result (one stable JSON shape per command).
PRINT_FORMAT_OPTION = typer.Option(PrintFormat.text, "--format",
                                   help="text for people, json for machines (one stable shape).")
