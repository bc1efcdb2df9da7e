"""A throwaway PostgreSQL server from the Debian package's binaries, for the tests and the benchmarks.

:func:`start` runs ``initdb`` on a new folder under the system's temporary folder, then ``pg_ctl start``
on 127.0.0.1 and a free port (its Unix socket in the same folder), with trust authentication for local
connections: nothing outside this machine can reach it. ``initdb`` refuses to run as root, so as root
(CI) both commands run as the ``postgres`` system user the Debian package creates (``runuser``), and
the folder is handed to that user. :meth:`Server.stop` stops the server and removes the folder.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVICE_USER = "postgres"


def binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: the newest ``/usr/lib/postgresql/*/bin``, else the PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> str | None:
    """Why no server can be started here (a sentence), or None."""
    if binaries() is None:
        return "the PostgreSQL server binaries (initdb, pg_ctl) are not installed (.ci/run installs postgresql)"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or _uid(SERVICE_USER) is None):
        return f"initdb refuses root, and there is no {SERVICE_USER!r} user to run it as (.ci/run installs postgresql)"
    return None


def _uid(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    url: str
    folder: Path
    _bin: Path

    def stop(self) -> None:
        _run(self._bin / "pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


def start(*, durable: bool = False) -> Server:
    """A new server; ``durable=False`` turns fsync off (tests: no server crash is simulated)."""
    why = missing()
    if why:
        raise RuntimeError(why)
    bin_folder = binaries()
    assert bin_folder is not None
    folder = Path(tempfile.mkdtemp(prefix="llm-fsm-pg-"))
    if os.geteuid() == 0:
        uid = _uid(SERVICE_USER)
        assert uid is not None
        os.chown(folder, uid, -1)
    data, port = folder / "data", free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
    if not durable:
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    try:
        _run(bin_folder / "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        _run(
            bin_folder / "pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "-t", "60", "start"
        )
    except subprocess.CalledProcessError as exc:
        log = folder / "log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr or exc}\n{detail}") from None
    return Server(f"postgresql://postgres@127.0.0.1:{port}/postgres", folder, bin_folder)


def _run(*command: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    args = [str(c) for c in command]
    if os.geteuid() == 0:
        args = ["runuser", "-u", SERVICE_USER, "--", *args]
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=120)
