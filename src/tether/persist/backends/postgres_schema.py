"""The PostgreSQL backend's schema: its tables, the batch function, and the
migrations that bring a schema to :data:`SCHEMA_VERSION`.

Tables: ``sessions`` (one row per session: its header, the listing columns and
``next_seq``), ``events`` (``(session_id, seq)`` primary key, ``data`` as
``jsonb``), ``leases`` (holder, fencing token, expiry) and the
``lease_tokens`` sequence; ``runs``, the queue of submitted runs, and
``queues``, their limits (see
:mod:`~tether.persist.backends.postgres_runs`); ``budget_days``, what all
hosts spent each UTC day, and ``budget_reservations``, the reservations not
settled yet (the cluster budget: see :data:`BUDGET_FUNCTION`);
``schema_migrations`` records what was applied.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from tether.persist.backends.errors import UnsupportedFormatError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 5
"""The newest schema this module creates, and the newest it reads."""

APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION append_batch(
    p_id text, p_token bigint, p_header jsonb, p_created double precision, p_events jsonb,
    p_first bigint, p_count integer, p_turns integer, p_last double precision, p_title text,
    p_channel text, p_create boolean
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    lease record;
    stored_next bigint;
BEGIN
    -- The fence: FOR SHARE makes a takeover (an update of the row) wait for
    -- this write, and this write wait for a takeover under way.
    SELECT host, pid, token, expires_at > clock_timestamp() AS live INTO lease
        FROM leases WHERE session_id = p_id FOR SHARE;
    IF p_token IS NOT NULL THEN
        IF lease IS NULL OR lease.token <> p_token THEN
            RAISE EXCEPTION USING ERRCODE = 'TT001', MESSAGE = coalesce(lease.host, '');
        END IF;
    ELSIF lease IS NOT NULL AND lease.live THEN
        RAISE EXCEPTION USING ERRCODE = 'TT002', MESSAGE = lease.host || ' ' || lease.pid;
    END IF;
    SELECT next_seq INTO stored_next FROM sessions WHERE id = p_id FOR UPDATE;
    IF FOUND AND p_create THEN
        RAISE EXCEPTION USING ERRCODE = 'TT005', MESSAGE = 'already stored';
    END IF;
    IF NOT FOUND THEN
        IF p_header IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'TT004', MESSAGE = 'the session is not stored';
        END IF;
        IF p_count > 0 AND p_first <> 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'TT003', MESSAGE = '0';
        END IF;
        INSERT INTO sessions (id, header, created_at, next_seq, turn_count, last_activity, title)
            VALUES (p_id, p_header, p_created, p_count, p_turns, coalesce(p_last, p_created),
                    p_title)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TT005', MESSAGE = 'created by another writer';
        END IF;
    ELSIF p_count = 0 THEN
        RETURN;
    ELSE
        IF stored_next <> p_first THEN
            RAISE EXCEPTION USING ERRCODE = 'TT003', MESSAGE = stored_next::text;
        END IF;
        UPDATE sessions SET next_seq = next_seq + p_count, turn_count = turn_count + p_turns,
            last_activity = p_last, title = coalesce(title, p_title)
            WHERE id = p_id;
    END IF;
    IF p_count > 0 THEN
        INSERT INTO events (session_id, seq, type, time, data)
            SELECT p_id, r.seq, r.type, r.time, r.data
            FROM jsonb_to_recordset(p_events)
                AS r(seq bigint, type text, time double precision, data jsonb);
        PERFORM keep_budget(p_id, p_events);
        IF p_channel IS NOT NULL THEN
            PERFORM pg_notify(p_channel, p_id || ' ' || (p_first + p_count - 1));
        END IF;
    END IF;
END
$$
"""
"""One batch, in one statement (one round trip, its own transaction): the fence,
the seq check, the session row, the events, and the cluster budget's
reservations and settlements the batch logs (:data:`BUDGET_FUNCTION`). Hosts of this version pass no
``p_channel`` and ring the doorbell after commit
(:mod:`~tether.persist.backends.postgres_doorbell`); a host of schema 2 still
running during an upgrade passes its channel and rings inside the
transaction, as it did. Errors by SQLSTATE:
``TT001`` taken over (message: the new host), ``TT002`` leased by another
(``host pid``), ``TT003`` seq conflict (the stored next seq), ``TT004`` a
first write without a valid header, ``TT005`` a create (``p_create``) of a
session already stored, or created by another writer meanwhile."""

BUDGET_FUNCTION = """
CREATE OR REPLACE FUNCTION keep_budget(p_id text, p_events jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
    claim jsonb;
    open_ record;
    v_tokens bigint;
    v_usd double precision;
BEGIN
    FOR e IN SELECT value FROM jsonb_array_elements(p_events)
            WHERE value->>'type' IN ('budget/reserved', 'budget/settled') LOOP
        IF e->>'type' = 'budget/reserved' THEN
            claim := e->'data'->'cluster';
            CONTINUE WHEN claim IS NULL OR jsonb_typeof(claim) <> 'object';
            v_tokens := (e->'data'->>'tokens')::bigint;
            v_usd := coalesce((e->'data'->>'usd')::double precision, 0);
            INSERT INTO budget_days (day) VALUES ((claim->>'day')::date) ON CONFLICT DO NOTHING;
            -- Check and take in one statement: a concurrent reservation's update
            -- holds the row, and this one's condition is evaluated again on what
            -- that one committed.
            UPDATE budget_days
                SET reserved_tokens = reserved_tokens + v_tokens,
                    reserved_usd = reserved_usd + v_usd
                WHERE day = (claim->>'day')::date
                  AND (claim->>'tokens' IS NULL
                       OR reserved_tokens + spent_tokens + v_tokens <= (claim->>'tokens')::bigint)
                  AND (claim->>'usd' IS NULL
                       OR reserved_usd + spent_usd + v_usd <= (claim->>'usd')::double precision);
            INSERT INTO budget_reservations (session_id, id, day, tokens, usd, granted)
                VALUES (p_id, e->'data'->>'id', (claim->>'day')::date, v_tokens, v_usd, FOUND);
        ELSE
            DELETE FROM budget_reservations
                WHERE session_id = p_id AND id = e->'data'->>'id'
                RETURNING budget_reservations.day, budget_reservations.tokens,
                          budget_reservations.usd, budget_reservations.granted INTO open_;
            CONTINUE WHEN NOT FOUND OR NOT open_.granted;
            UPDATE budget_days
                SET reserved_tokens = reserved_tokens - open_.tokens,
                    reserved_usd = reserved_usd - open_.usd,
                    spent_tokens = spent_tokens + (e->'data'->>'tokens')::bigint,
                    spent_usd = spent_usd
                        + coalesce((e->'data'->>'usd')::double precision, 0)
                WHERE day = open_.day;
        END IF;
    END LOOP;
END
$$
"""
"""The cluster budget, kept in the transaction of the batch that logs it.

A ``budget/reserved`` event whose data has a ``cluster`` claim (the UTC day and
the reserving host's limits) is granted only if the day's reserved plus spent
amounts plus its own fit the limits; the check and the taking are one
conditional ``UPDATE`` of the day's row, so two hosts can never both take the
last of a day. Granted or not, the reservation gets a row in
``budget_reservations`` (``granted`` says which), where the reserving host reads
the outcome once the batch is committed. A ``budget/settled`` event removes its
reservation's row and, for a granted one, moves the reservation out of the day's
``reserved`` and what was really used into its ``spent``."""

BUDGET_TABLES = (
    """
    CREATE TABLE budget_days (
        day date PRIMARY KEY,
        reserved_tokens bigint NOT NULL DEFAULT 0,
        reserved_usd double precision NOT NULL DEFAULT 0,
        spent_tokens bigint NOT NULL DEFAULT 0,
        spent_usd double precision NOT NULL DEFAULT 0
    )
    """,
    """
    CREATE TABLE budget_reservations (
        session_id text NOT NULL,
        id text NOT NULL,
        day date NOT NULL,
        tokens bigint NOT NULL,
        usd double precision NOT NULL,
        granted boolean NOT NULL,
        reserved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (session_id, id)
    )
    """,
)
"""The cluster budget's tables: what each UTC day spent (settled) and has reserved (not
settled yet), and the reservations not settled yet."""

_APPEND_BEFORE_CREATE = (
    "append_batch(text, bigint, jsonb, double precision, jsonb, bigint, integer, integer,"
    " double precision, text, text)"
)
"""The signature of schema 1's ``append_batch``, which had no ``p_create``."""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE sessions (
            id text PRIMARY KEY,
            header jsonb NOT NULL,
            created_at double precision NOT NULL,
            next_seq bigint NOT NULL DEFAULT 0,
            turn_count integer NOT NULL,
            last_activity double precision NOT NULL,
            title text
        )
        """,
        """
        CREATE TABLE events (
            session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            type text NOT NULL,
            time double precision NOT NULL,
            data jsonb NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
        """
        CREATE TABLE leases (
            session_id text PRIMARY KEY,
            holder text NOT NULL,
            host text NOT NULL,
            pid integer NOT NULL,
            token bigint NOT NULL,
            expires_at timestamptz NOT NULL
        )
        """,
        "CREATE SEQUENCE lease_tokens",
        APPEND_FUNCTION,
    ),
    (f"DROP FUNCTION IF EXISTS {_APPEND_BEFORE_CREATE}", APPEND_FUNCTION),
    (APPEND_FUNCTION,),  # the doorbell out of the write transaction
    (
        """
        CREATE TABLE runs (
            session_id text PRIMARY KEY,
            task text NOT NULL,
            cwd text NOT NULL,
            model text,
            queue text NOT NULL DEFAULT 'default',
            priority integer NOT NULL DEFAULT 0,
            state text NOT NULL DEFAULT 'queued'
                CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled', 'parked')),
            attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL DEFAULT 3,
            worker text,
            claimed_until timestamptz,
            submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            finished_at timestamptz,
            outcome text
        )
        """,
        "CREATE INDEX runs_ready ON runs (priority DESC, submitted_at)"
        " WHERE state IN ('queued', 'running')",
        "CREATE TABLE queues (name text PRIMARY KEY, max_running integer CHECK (max_running > 0))",
    ),
    (*BUDGET_TABLES, BUDGET_FUNCTION, APPEND_FUNCTION),  # the cluster budget
)
"""Migration ``n`` (1-based) brings the schema from version ``n - 1`` to ``n``."""

LOCK_CLASS = 0x7E7E
"""The first key of the advisory lock migrations take (the second is the schema's hash)."""


def migrate(conn: psycopg.Connection[Any], schema_name: str) -> None:
    """Bring ``schema_name`` to :data:`SCHEMA_VERSION`, once, whoever else starts now.

    Migrations run under an advisory lock keyed by the schema, so hosts that
    start together migrate once; each migration commits with its version row.

    Raises:
        UnsupportedFormatError: the schema is newer than this module.
    """
    schema = sql.Identifier(schema_name)
    conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_CLASS, schema_name))
    try:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        version = int(row[0]) if row is not None else 0
        if version > SCHEMA_VERSION:
            raise UnsupportedFormatError(
                f"PostgreSQL schema {schema_name}", version, SCHEMA_VERSION
            )
        for number, statements in enumerate(MIGRATIONS[version:], version + 1):
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (number,))
            log.info("PostgreSQL schema %s migrated to version %d", schema_name, number)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_CLASS, schema_name))
