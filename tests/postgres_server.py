"""A throwaway PostgreSQL server for tests: initdb in a temporary directory, loopback only.

``initdb`` and ``postgres`` refuse to run as root, so as root the server runs as
an unprivileged user (``postgres`` where it exists, else ``nobody``) through
``runuser``. Tests use :func:`server_for` from a session fixture: one server per
test session, stopped when the session ends; each test gets its own database.
Where something the server needs is missing, :func:`missing` says what, for a skip.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BINARIES = ("initdb", "pg_ctl")
SUPERUSER = "autotune"
_USERS = ("postgres", "nobody")


def missing() -> str | None:
    """Why no server can be started here, or None."""
    absent = [name for name in BINARIES if shutil.which(name) is None]
    if absent:
        return f"PostgreSQL server binaries not on PATH: {', '.join(absent)}"
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or _unprivileged_user() is None):
        return "running as root with no runuser or no unprivileged user (postgres, nobody) to run the server"
    return None


class PostgresServer:
    """One PostgreSQL server on a free loopback port, its data in a temporary directory."""

    def __init__(self):
        self.password = "pw-" + secrets.token_hex(8)
        # /tmp: short enough for the socket path, and reachable by the server's user when that is not ours
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-", dir="/tmp" if os.path.isdir("/tmp") else None))
        self.data = self.root / "data"
        self.port = _free_port()
        self._user = _unprivileged_user() if os.geteuid() == 0 else None
        self._databases = 0

    def start(self) -> PostgresServer:
        """initdb (password auth for TCP), then start on 127.0.0.1 only; raises with the log on failure."""
        password_file = self.root / "password"
        password_file.write_text(self.password + "\n")
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            for path in (self.root, password_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--pwfile", str(password_file),
                  "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-t", "60", "-o", options,
                  "start")
        return self

    def stop(self) -> None:
        """Stop the server at once and delete its directory."""
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        """A SQLAlchemy URL of ``database`` on this server (psycopg)."""
        return (f"postgresql+psycopg://{SUPERUSER}:{password or self.password}@127.0.0.1:{self.port}/{database}")

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        self._databases += 1
        name = f"test_{os.getpid()}_{self._databases}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, password=self.password,
                             dbname="postgres", autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _run(self, *command: str, check: bool = True) -> None:
        if self._user is not None:
            command = ("runuser", "-u", self._user, "--", *command)
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()} {tail}")


def server_for(config) -> PostgresServer:
    """The session's server (started on first use, stopped at the end of the session)."""
    server = getattr(config, "_autotune_postgres", None)
    if server is None:
        server = PostgresServer()
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        config._autotune_postgres = server
        config.add_cleanup(server.stop)
    return server


def _unprivileged_user() -> str | None:
    for name in _USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
