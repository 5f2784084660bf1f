"""The PostgreSQL server the tests run the store on (``.ci/postgres-up`` starts it), one schema per test."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

SERVER_URL = os.environ.get("CUBICLE_TEST_DATABASE_URL", "postgresql:///cubicle_test?host=/var/run/postgresql")
"""A database the user running the tests may create schemas in: ``.ci/postgres-up`` prints such a URL."""


def _connect() -> psycopg.Connection:
    try:
        return psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        pytest.fail(
            f"The tests on PostgreSQL need its server ({SERVER_URL}): run .ci/postgres-up, or point "
            f"CUBICLE_TEST_DATABASE_URL at a database you may create schemas in. ({str(err).strip()})"
        )


@contextmanager
def postgres_schema() -> Iterator[str]:
    """The URL of a new, empty schema on the test server (as the only one on its search path); dropped after."""
    name = f"t_{secrets.token_hex(6)}"
    with _connect() as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    separator = "&" if "?" in SERVER_URL else "?"
    try:
        yield f"{SERVER_URL}{separator}options=-csearch_path%3D{name}"
    finally:
        with _connect() as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")
