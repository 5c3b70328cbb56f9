"""Where commands write: one rule for every output file and directory.

Every command that writes checks its destination before any work starts (`check_file`,
`check_dir`) and writes through `write_file` / `write_with`:

* an existing file is replaced only with ``--force``, and only if it is a regular file;
* nothing is ever written inside a run directory (a folder holding ``run.json``): runs are
  written whole by `mtia-trace replay` and never changed afterwards;
* the destination must be creatable: the nearest existing ancestor is a writable directory
  and the name fits the file system;
* files are written to a hidden temporary beside the destination and renamed into place, so
  a failed or interrupted write leaves the old file (or nothing);
* a run being computed is claimed (`claimed`: a hidden ``.NAME.claim`` beside it), so a second
  replay to the same destination is refused at its start, not after its own replay.

Hidden temporaries are named ``.NAME.tmp-HOST-PID-XXXXXX`` (HOST: 4 hex digits of the host
name). One left by a killed process is removed by `clean_stale` the next time anything is
written into the same folder: when its process is gone from this host (and it is over a minute
old), or whatever made it once it is over a day old (a folder shared between hosts).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mtia_trace.errors import RunExistsError, UsageError

#: The file that makes a directory a run (see `mtia_trace.storage`).
RUN_MARKER = "run.json"
#: A temporary whose process is gone is stale after this long (seconds); any after `STALE_S`.
GONE_S = 60.0
STALE_S = 24 * 3600.0
#: Bytes a temporary's name adds to the destination's name.
TMP_EXTRA = 28
_HOST = f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFF:04x}"
_TMP = re.compile(r"^\..+\.tmp-(?:([0-9a-f]{4})-(\d+)-)?")


def enclosing_run(path: Path) -> Path | None:
    """The run directory that ``path`` is, or lies inside, if any."""
    p = Path(os.path.abspath(path))
    for d in (p, *p.parents):
        try:
            if (d / RUN_MARKER).is_file():
                return d
        except OSError:
            return None
    return None


def _nearest_existing(path: Path) -> Path:
    p = Path(os.path.abspath(path)).parent
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def check_parent(path: Path, flag: str) -> None:
    """``path`` can be created: its name fits and its nearest existing ancestor is a writable
    directory (folders in between are created when writing)."""
    base = _nearest_existing(path)
    if not base.is_dir():
        raise UsageError(f"{path}: {base} is a file, not a directory; choose another {flag}")
    try:
        name_max = os.pathconf(base, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    parts = Path(os.path.abspath(path)).relative_to(base).parts
    long = next((p for p in parts if len(os.fsencode(p)) + TMP_EXTRA > name_max), None)
    if long is not None:
        raise UsageError(f"{path}: name too long ({len(os.fsencode(long))} bytes, the file "
                         f"system allows {name_max - TMP_EXTRA} here); choose a shorter {flag}")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: cannot write in {base} (permission denied or read-only); "
                         f"choose another {flag}")


def check_file(path: Path, *, force: bool, flag: str = "-o") -> Path:
    """Refuse an output file that cannot or may not be written (see the module rule)."""
    run = enclosing_run(path)
    if run is not None:
        where = "is" if Path(os.path.abspath(path)) == run else "is inside"
        raise UsageError(f"{path}: {where} the run directory {run}; runs are never modified, "
                         f"choose a {flag} path outside it")
    if os.path.lexists(path):
        if path.is_dir():
            raise UsageError(f"{path}: is a directory; give a file name to {flag}")
        if not force:
            raise RunExistsError(f"{path}: already exists; pass --force to overwrite it or "
                                 f"choose another {flag}")
        if not path.is_file():
            raise UsageError(f"{path}: exists and is not a regular file; refusing to replace it "
                             f"even with --force, choose another {flag}")
    check_parent(path, flag)
    return path


def check_dir(path: Path, *, force: bool, flag: str = "-o/--output",
              replaceable: Callable[[Path], bool] | None = None, what: str = "output") -> Path:
    """Refuse an output directory that may not be (re)placed.

    ``replaceable`` says whether an existing directory may be replaced with ``--force``; a run
    directory, or one inside a run, is always refused (runs are replaced only by `replay`).
    """
    p = Path(os.path.abspath(path))
    run = enclosing_run(p)
    if run is not None:
        where = "is" if p == run else "is inside"
        raise UsageError(f"{path}: {where} the run directory {run}; runs are never modified, "
                         f"choose a {flag} outside it")
    if os.path.lexists(path):
        if not force:
            raise RunExistsError(f"{path}: already exists; pass --force to replace it or "
                                 f"choose another {flag}")
        if not path.is_dir() or (replaceable is not None and not replaceable(path)):
            raise UsageError(f"{path}: exists and is not {what}; refusing to replace it even "
                             f"with --force, choose another {flag}")
    check_parent(path, flag)
    return path


def _prefix(name: str) -> str:
    return f".{name}.tmp-{_HOST}-{os.getpid()}-"


def temporary_dir(dest: Path) -> Path:
    """A fresh hidden temporary directory beside ``dest`` (stale ones there are removed)."""
    clean_stale(dest.parent)
    return Path(tempfile.mkdtemp(prefix=_prefix(dest.name), dir=dest.parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _stale(entry: Path, now: float) -> bool:
    m = _TMP.match(entry.name)
    if m is None:
        return False
    age = now - entry.lstat().st_mtime
    if age > STALE_S:
        return True
    host, pid = m.group(1), m.group(2)
    return host == _HOST and age > GONE_S and not _alive(int(pid))


def clean_stale(folder: Path) -> list[Path]:
    """Remove the hidden temporaries in ``folder`` left by processes that died (see above)."""
    removed: list[Path] = []
    now = time.time()
    try:
        entries = [e for e in folder.iterdir() if e.name.startswith(".") and ".tmp-" in e.name]
    except OSError:
        return removed
    for e in entries:
        try:
            if not _stale(e, now):
                continue
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e, ignore_errors=True)
            else:
                e.unlink(missing_ok=True)
            removed.append(e)
        except OSError:
            continue
    return removed


def write_with(path: Path, writer: Callable[[Path], object], *, force: bool,
               flag: str = "-o") -> Path:
    """Check ``path``, call ``writer(tmp)`` for a hidden temporary beside it, rename into place."""
    check_file(path, force=force, flag=flag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path.parent)
        tmp = path.with_name(_prefix(path.name) + secrets.token_hex(3))
        try:
            writer(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                tmp.unlink()
    except OSError as exc:
        why = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
        raise UsageError(f"{path}: cannot write ({why}); choose another {flag} path") from None
    return path


def write_file(data: str | bytes, path: Path, *, force: bool, flag: str = "-o") -> Path:
    """Write ``data`` to ``path`` under the module rule."""
    raw = data.encode() if isinstance(data, str) else data
    return write_with(path, lambda tmp: tmp.write_bytes(raw), force=force, flag=flag)


#: A claim older than this is stale whatever holds it (seconds; a replay takes minutes).
CLAIM_STALE_S = 24 * 3600.0


@contextmanager
def claimed(dest: Path) -> Iterator[None]:
    """Hold ``dest`` while a run for it is computed: a hidden ``.NAME.claim`` beside it, made
    exclusively, naming this host and process. A second writer of the same destination is
    refused at once, not after its own full replay; a claim whose process is gone (this host)
    or older than a day is taken over."""
    claim = dest.with_name(f".{dest.name}.claim")
    made = [d for d in (dest.parent, *dest.parent.parents) if not os.path.lexists(d)]
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{dest}: cannot create ({exc.strerror or exc}); choose another "
                         "-o/--output") from None
    me = f"{_HOST} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _claim_holder(claim)
            if holder is None:
                continue  # stale: removed, try again
            raise UsageError(f"{dest}: another mtia-trace ({holder}) is writing a run there; "
                             "wait for it or choose another -o/--output") from None
        except OSError as exc:
            raise UsageError(f"{dest}: cannot write beside it ({exc.strerror or exc}); choose "
                             "another -o/--output") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(me)
        break
    else:
        raise UsageError(f"{dest}: another mtia-trace keeps claiming it; choose another "
                         "-o/--output")
    try:
        yield
    finally:
        try:
            if claim.read_text() == me:
                claim.unlink()
        except OSError:
            pass
        if not os.path.lexists(dest):  # nothing written: leave no folder this claim made
            for d in made:
                try:
                    d.rmdir()
                except OSError:
                    break


def _claim_holder(claim: Path) -> str | None:
    """Who holds ``claim`` ("process 123" / "process 123 on another host"), or None when the
    claim was stale (then it is removed)."""
    try:
        host, _, pid = claim.read_text().partition(" ")
        age = time.time() - claim.stat().st_mtime
    except OSError:
        return None  # gone meanwhile
    alive = host != _HOST or (pid.isdigit() and _alive(int(pid)))
    if alive and age < CLAIM_STALE_S:
        return f"process {pid}" + ("" if host == _HOST else " on another host")
    claim.unlink(missing_ok=True)
    return None
