"""The PostgreSQL backend's connections: a small pool, each connection set to
the backend's schema and stall limit, and which errors mean one was lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from tether.persist.backends.errors import BackendClosedError


class Pool:
    """At most ``size`` connections to ``url``, each used by one caller at a time.

    Every connection runs in autocommit mode with ``search_path`` set to
    ``schema`` and ``idle_in_transaction_session_timeout`` to ``stall_limit``
    seconds (the server ends a transaction whose client stopped). ``name``
    names the owner in :class:`BackendClosedError`.
    """

    def __init__(self, url: str, schema: str, *, stall_limit: float, size: int, name: str) -> None:
        self._url = url
        self._schema = schema
        self._stall_limit = stall_limit
        self._name = name
        self._lock = threading.Lock()
        self._closed = False
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(max(1, size))

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for the caller alone; a broken one is dropped.

        Raises:
            BackendClosedError: the pool was closed.
            psycopg.OperationalError: a new connection cannot be made.
        """
        if self._closed:
            raise BackendClosedError(f"{self._name} is closed")
        with self._slots:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = self._connect()
            try:
                yield conn
            finally:
                if conn.broken or conn.closed:
                    conn.close()
                else:
                    with self._lock:
                        if self._closed:
                            conn.close()
                        else:
                            self._idle.append(conn)

    def close(self) -> None:
        """Close every idle connection; one in use closes when it comes back.
        Later :meth:`connection` calls raise :class:`BackendClosedError`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self._url, autocommit=True, application_name=f"tether {self._schema}"[:63]
        )
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))
            conn.execute(
                sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                    sql.Literal(f"{int(self._stall_limit * 1000)}ms")
                )
            )
        except BaseException:
            conn.close()
            raise
        return conn


def connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` means the connection is gone (the server ended it, or the network)."""
    return isinstance(exc, psycopg.errors.AdminShutdown) or exc.sqlstate in (
        None,
        "57P01",  # terminated by the administrator (pg_terminate_backend)
        "25P03",  # ended as idle in a transaction too long (this host was stopped)
        "08000",
        "08003",
        "08006",
    )
