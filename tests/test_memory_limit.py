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


#: A child that leaves the CLI ``sys.argv[1]`` MB of address space beyond what it has mapped,
#: then inspects the bundled CPU trace (DuckDB, Arrow's compute, pandas load after the limit).
TIGHT = textwrap.dedent("""
    import resource, sys
    from mtia_trace.cli import main
    with open("/proc/self/status") as fh:
        mapped = next(int(x.split()[1]) * 1024 for x in fh if x.startswith("VmSize:"))
    room = mapped + int(float(sys.argv[1]) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (room, room))
    sys.exit(main(["inspect", sys.argv[2]]))
""")


@pytest.mark.parametrize("room_mb", [0, 6, 17, 64])
def test_no_room_left_is_one_line(room_mb: int) -> None:
    # too little room to grow the stack, a library that no longer maps ("failed to map segment
    # from shared object": DuckDB's, pydantic's, a traceback before) or an import's directory
    # scan failing with ENOMEM, whichever comes first at each margin: the one out-of-memory line
    from pathlib import Path

    trace = Path(__file__).resolve().parent.parent / "sample_traces" / "torch_cpu_dlrm"
    r = subprocess.run([sys.executable, "-c", TIGHT, str(room_mb), str(trace)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr[-600:])
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("mtia-trace: error: out of memory"), \
        r.stderr[-600:]


def test_a_worker_thread_that_cannot_start_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # under a limit Arrow's thread pool cannot map a new thread's stack: it raises its own
    # error type (seen converting 1M events to pandas under 1 GiB), which was a traceback
    import pyarrow as pa

    from mtia_trace.cli import inspect_cmd, main

    def failing(*_a: object, **_k: object) -> None:
        raise pa.lib.ArrowException(
            "Unknown error: Failed to launch worker thread: Resource temporarily unavailable")

    monkeypatch.setattr(inspect_cmd, "load", failing)
    assert main(["inspect", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mtia-trace: error: out of memory"), err
    # any other error of Arrow's stays what it is
    monkeypatch.setattr(inspect_cmd, "load", lambda *_a: (_ for _ in ()).throw(
        pa.lib.ArrowException("something else")))
    with pytest.raises(pa.lib.ArrowException):
        main(["inspect", "x.json"])


#: A child that factorizes 2M distinct keys (`mtia_trace.keys.codes`, as the ingest's duplicate
#: check does) with ``sys.argv[1]`` MB of address space left.
FACTORIZE = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from mtia_trace import keys
    v = np.arange(2_000_000, dtype=np.int64) * 7919 % 1_000_003_001
    with open("/proc/self/status") as fh:
        mapped = next(int(x.split()[1]) * 1024 for x in fh if x.startswith("VmSize:"))
    room = mapped + int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (room, room))
    try:
        keys.codes(v)
        print("ok")
    except MemoryError:
        print("MemoryError")
""")


def test_factorizing_without_room_is_a_memory_error() -> None:
    # pandas' hash table does not check its allocations: with 16 or 32 MB left this was a
    # SIGSEGV (1M events under 1 GiB in the fuzz campaign crashed here)
    for room_mb in range(16, 161, 16):
        r = subprocess.run([sys.executable, "-c", FACTORIZE, str(room_mb)], capture_output=True,
                           text=True, timeout=120, check=False)
        assert r.returncode == 0 and r.stdout.strip() in ("ok", "MemoryError"), \
            (room_mb, r.returncode, r.stderr[-300:])
