"""Under an address-space limit (``ulimit -v``) a command runs out of memory with one line,
never a SIGSEGV: the main thread's stack is grown while there is room, since a stack that must
grow once the heap has taken the rest of the limit is killed by the kernel."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS, /proc")

#: A child that sets a 1 GiB limit, runs the CLI (or not), fills the heap to the limit, then
#: compares two 6,000-deep nested lists: CPython recurses in C (~1 MB of stack), no heap.
CHILD = textwrap.dedent("""
    import resource, sys
    sys.setrecursionlimit(100_000)
    x, y = [], []
    for _ in range(6000):
        x, y = [x], [y]
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
    from mtia_trace.cli import main
    if sys.argv[1] == "cli":
        main(["hw", "list"])
    blocks = []
    for size in (2**20, 4096):
        try:
            while True:
                blocks.append(bytearray(size))
        except MemoryError:
            pass
    del blocks[-2:]  # a little heap, no room to grow the stack
    print("equal" if x == y else "differ")
""")


def _child(arg: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_command_grows_the_stack_before_the_heap_fills_the_limit() -> None:
    r = _child("cli")
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert r.stdout.strip().endswith("equal")


def test_without_the_command_the_same_work_is_killed() -> None:
    # the mechanism the CLI guards against, shown without it: SIGSEGV, no MemoryError
    r = _child("none")
    assert r.returncode == -11, (r.returncode, r.stderr[-500:])
