"""Two `cubicle serve` processes on one fresh PostgreSQL schema and one data directory, for the tests of several
controllers (each with an instance of its own, as on two hosts, and a connection name a test can cut off)."""

from __future__ import annotations

import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from controller.agent.scripted import free_port
from tests.databases import postgres_schema
from tests.integration.api_helpers import Api, serve_env, serve_subprocess
from tests.sandbox_defaults import TEST_INSTANCE

TOKEN = "controllers-token"


@dataclass
class Controller:
    name: str
    process: subprocess.Popen[bytes]
    api: Api
    connection_name: str
    """The application_name of its database connections."""


@dataclass
class Pair:
    database_url: str
    data_dir: Path
    env: dict[str, str]
    a: Controller
    b: Controller

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())

    def cut_off(self, controller: Controller) -> int:
        """Drop every database connection of ``controller`` (as a server restart or a network cut would); how many."""
        found = self.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            controller.connection_name,
        )
        return len(found)


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a process a test started, a controller or a server (continued first if a test stopped it)."""
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def controller_pair(tmp_path: Path, model_url: str, lease_s: float, instance: str | None = None) -> Iterator[Pair]:
    """Two controllers, each an instance of its own; with ``instance``, both of that one (two on one host, which
    can tell whether the other's process still runs)."""
    with postgres_schema() as url, ExitStack() as stack:
        controllers = []
        env: dict[str, str] = {}
        for name in ("a", "b"):
            connection_name = f"cubicle-test-{name}-{secrets.token_hex(4)}"
            env = serve_env(model_url, TOKEN, tmp_path, instance or f"{TEST_INSTANCE}-{name}")
            env |= {
                "CUBICLE_DATABASE_URL": f"{url}&application_name={connection_name}",
                "CUBICLE_LEASE_S": str(lease_s),
                # Small quotas: the sessions these tests leave running are counted against the data disk's free
                # space, and five of the default 10 GiB ones were refused on a machine with 58 GB free.
                "CUBICLE_LIMITS__DISK_MB": "512",
            }
            port = free_port()
            process = serve_subprocess(env, port, tmp_path / f"serve-{name}.log")
            stack.callback(stop, process)
            api = Api(f"http://127.0.0.1:{port}", TOKEN)
            stack.callback(api.http.close)
            controllers.append(Controller(name, process, api, connection_name))
        yield Pair(url, tmp_path / "data", env, *controllers)
