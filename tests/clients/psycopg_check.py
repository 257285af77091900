"""Client-compatibility check: psycopg 3 against a running Sluice server.

Usage: python psycopg_check.py PORT

Exercises what a Python application does with psycopg 3: connect, DDL,
parameterised INSERTs (executemany in pipeline mode and a multi-row INSERT),
a parameterised continuous query with LIMIT, the values and Python types it
returns, SQLSTATEs on errors, a usable connection after rollback, and
server-side (named) cursors read in chunks.

Every step runs even when an earlier one failed (a step that needs an
earlier one's data fails too); each failure is printed on stderr as
`psycopg check FAILED at <step>: <what>`. Exits 1 if any step failed;
prints `psycopg: ok` when all passed.
"""

import datetime
import sys
import threading
import time
import traceback
import uuid

import psycopg
import psycopg.errors
import psycopg.types
from psycopg.pq import TransactionStatus

BASE = datetime.datetime(2024, 1, 1, 12, 0, 0)
# 5000 nexmark events, 46 in every 50 of them bids.
NEXMARK_BIDS = 4600
# How long a continuous query may take before the check cancels it (a
# LIMIT query over a memory stream waits forever for rows that are missing).
QUERY_TIMEOUT_S = 15


class CheckFailed(Exception):
    pass


class Deadline:
    """Cancels the connection's running statement after `seconds`; a
    statement cancelled so raises CheckFailed instead of QueryCanceled."""

    def __init__(self, conn, what, seconds=QUERY_TIMEOUT_S):
        self.conn, self.what, self.seconds = conn, what, seconds
        self.fired = False

    def _fire(self):
        self.fired = True
        try:
            self.conn.cancel_safe(timeout=5)
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self):
        self.timer = threading.Timer(self.seconds, self._fire)
        self.timer.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.timer.cancel()
        if self.fired and (exc_type is None or issubclass(exc_type, psycopg.errors.QueryCanceled)):
            raise CheckFailed(f"{self.what} did not finish within {self.seconds}s (cancelled)")
        return False


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def row(i):
    """Row i of the test stream: (id, name, price, ts) with millisecond ts."""
    return (i, f"item-{i} ünïcode", i * 1.5, BASE + datetime.timedelta(seconds=i, milliseconds=250))


class Check:
    def __init__(self, conn):
        self.conn = conn
        suffix = uuid.uuid4().hex[:12]
        self.stream = f"psy_{suffix}"
        self.inserted = f"psy_ins_{suffix}"
        self.bids = f"psy_bids_{suffix}"
        self.inserted_ids = []

    def reset(self):
        """Leaves any transaction so the next step starts clean."""
        try:
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                self.conn.rollback()
        except psycopg.Error:
            pass
        self.conn.autocommit = True

    # -- steps ---------------------------------------------------------

    def server_version(self):
        v = self.conn.info.server_version
        expect(v >= 100000, f"server_version {v}")

    def create_streams(self):
        for name in (self.stream, self.inserted):
            self.conn.execute(
                f"CREATE STREAM {name} (id BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP, "
                "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)"
            )
        self.conn.execute(
            f"CREATE STREAM {self.bids} WITH (connector='nexmark', table='bid', 'events.max'=5000)"
        )
        # The query steps read rows inserted without parameters, so they
        # do not depend on the parameter steps.
        values = ", ".join(
            f"({i}, '{n}', {p!r}, '{ts.isoformat(sep=' ', timespec='milliseconds')}')"
            for i, n, p, ts in (row(i) for i in range(1, 9))
        )
        cur = self.conn.execute(f"INSERT INTO {self.stream} VALUES {values}")
        expect(cur.statusmessage == "INSERT 0 8", f"status {cur.statusmessage!r}, expected 'INSERT 0 8'")

    def catalog(self):
        # What psycopg itself and Python tools (SQLAlchemy's inspector,
        # pandas) read. Expected rows follow from create_streams: `stream`
        # has id BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP.
        types = dict(self.conn.execute("SELECT oid, typname FROM pg_type").fetchall())
        for oid, name in ((16, "bool"), (20, "int8"), (25, "text"), (701, "float8"), (1114, "timestamp")):
            expect(types.get(oid) == name, f"pg_type oid {oid} is {types.get(oid)!r}, expected {name!r}")
        info = psycopg.types.TypeInfo.fetch(self.conn, "numeric")
        expect(info is not None and (info.oid, info.array_oid) == (1700, 1231), f"TypeInfo.fetch('numeric'): {info}")
        columns = self.conn.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
            (self.stream,),
        ).fetchall()
        want = [
            ("id", "bigint", "YES"),
            ("name", "text", "YES"),
            ("price", "double precision", "YES"),
            ("ts", "timestamp without time zone", "YES"),
        ]
        expect(columns == want, f"information_schema.columns: {columns}, expected {want}")
        tables = [
            r[0]
            for r in self.conn.execute(
                "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1"
            )
        ]
        want = sorted([self.stream, self.inserted, self.bids])
        expect(tables == want, f"pg_class tables of public: {tables}, expected {want}")

    def executemany_insert(self):
        # psycopg sends these in pipeline mode: Parse, then Bind/Describe/
        # Execute per row with int2/float8/timestamp in binary, one Sync.
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.inserted} VALUES (%s, %s, %s, %s)", [row(i) for i in range(1, 6)]
            )
            expect(cur.rowcount == 5, f"executemany rowcount {cur.rowcount}, expected 5")
        self.inserted_ids += [1, 2, 3, 4, 5]

    def multirow_insert(self):
        flat = [v for i in range(6, 9) for v in row(i)]
        placeholders = ", ".join(["(%s, %s, %s, %s)"] * 3)
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.inserted} VALUES {placeholders}", flat)
            expect(cur.rowcount == 3, f"rowcount {cur.rowcount}, expected 3")
            expect(cur.statusmessage == "INSERT 0 3", f"status {cur.statusmessage!r}, expected 'INSERT 0 3'")
        self.inserted_ids += [6, 7, 8]

    def text_timestamp_insert(self):
        # The timestamp as a string (sent with no type) instead of a datetime.
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.inserted} VALUES (%s, %s, %s, %s)",
                (9, row(9)[1], row(9)[2], row(9)[3].isoformat(sep=" ")),
            )
        self.inserted_ids += [9]

    def read_back_inserts(self):
        n = len(self.inserted_ids)
        expect(n > 0, "no INSERT step succeeded")
        with self.conn.cursor() as cur, Deadline(self.conn, f"reading back the {n} inserted rows"):
            cur.execute(f"SELECT id, name, price, ts FROM {self.inserted} LIMIT {n}")
            got = [tuple(r) for r in cur.fetchall()]
        want = [row(i) for i in self.inserted_ids]
        expect(got == want, f"read back {got!r}, expected {want!r}")

    def _query(self, binary):
        want = [row(i) for i in range(3, 7)]
        with self.conn.cursor(binary=binary) as cur, Deadline(self.conn, "the LIMIT 4 query"):
            cur.execute(f"SELECT id, name, price, ts FROM {self.stream} WHERE id > %s LIMIT 4", (2,))
            got = cur.fetchall()
            names = [d.name for d in cur.description]
            expect(names == ["id", "name", "price", "ts"], f"column names {names}")
            types = [d.type_code for d in cur.description]
            # int8, varchar or text, float8, timestamp
            expect(
                types[0] == 20 and types[1] in (25, 1043) and types[2] == 701 and types[3] == 1114,
                f"column type OIDs {types}, expected [20, 25|1043, 701, 1114]",
            )
        expect(len(got) == 4, f"got {len(got)} rows, expected 4: {got!r}")
        for g, w in zip(got, want):
            expect(tuple(g) == w, f"row {g!r}, expected {w!r}")
            types = tuple(type(v).__name__ for v in g)
            expect(
                types == ("int", "str", "float", "datetime"),
                f"python types {types} for row {g!r}, expected (int, str, float, datetime)",
            )
            expect(g[3].tzinfo is None, f"TIMESTAMP came back with a time zone: {g[3]!r}")

    def query_text_results(self):
        self._query(binary=False)

    def query_binary_results(self):
        self._query(binary=True)

    def query_string_param(self):
        with self.conn.cursor() as cur, Deadline(self.conn, "the LIMIT 1 query"):
            cur.execute(f"SELECT id, ts FROM {self.stream} WHERE name = %s LIMIT 1", (row(7)[1],))
            got = cur.fetchall()
        expect([tuple(r) for r in got] == [(7, row(7)[3])], f"got {got!r}, expected [(7, {row(7)[3]!r})]")

    def query_timestamp_param(self):
        with self.conn.cursor() as cur, Deadline(self.conn, "the LIMIT 2 query"):
            cur.execute(f"SELECT id FROM {self.stream} WHERE ts >= %s LIMIT 2", (row(4)[3],))
            got = [r[0] for r in cur.fetchall()]
        expect(got == [4, 5], f"ids {got}, expected [4, 5]")

    def unknown_stream(self):
        self.conn.autocommit = False
        try:
            self.conn.execute("SELECT * FROM psycopg_no_such_stream LIMIT 1")
            raise CheckFailed("no error for an unknown stream")
        except psycopg.errors.UndefinedTable as e:
            expect(e.sqlstate == "42P01", f"sqlstate {e.sqlstate!r}")
        except psycopg.Error as e:
            raise CheckFailed(f"{type(e).__name__} sqlstate={e.sqlstate!r}: {e}; expected UndefinedTable (42P01)")
        status = self.conn.info.transaction_status
        expect(status == TransactionStatus.INERROR, f"transaction status {status.name}, expected INERROR")
        self.conn.rollback()
        status = self.conn.info.transaction_status
        expect(status == TransactionStatus.IDLE, f"transaction status after rollback {status.name}")
        got = self.conn.execute("SELECT %s::BIGINT + 1 AS n", (41,)).fetchone()
        expect(got is not None and got[0] == 42 and type(got[0]) is int, f"after rollback: got {got!r}")
        with Deadline(self.conn, "SELECT id FROM the stream LIMIT 1"):
            got = self.conn.execute(f"SELECT id FROM {self.stream} LIMIT 1").fetchone()
        expect(got is not None and type(got[0]) is int, f"after rollback: got {got!r} from the stream")
        self.conn.rollback()

    def failed_transaction_refuses_statements(self):
        # Postgres: in a failed transaction block every statement but
        # ROLLBACK fails with 25P02 until the block ends.
        self.conn.autocommit = False
        try:
            self.conn.execute("SELECT * FROM psycopg_no_such_stream LIMIT 1")
        except psycopg.errors.UndefinedTable:
            pass
        try:
            self.conn.execute("SELECT 1")
            raise CheckFailed(
                "SELECT 1 inside a failed transaction block (status "
                f"{self.conn.info.transaction_status.name}) succeeded; expected 25P02 "
                "(current transaction is aborted)"
            )
        except psycopg.errors.InFailedSqlTransaction:
            pass
        except psycopg.Error as e:
            raise CheckFailed(f"{type(e).__name__} sqlstate={e.sqlstate!r}: {e}; expected 25P02")
        self.conn.rollback()

    def syntax_error(self):
        try:
            self.conn.execute("SELEC 1")
            raise CheckFailed("no error for bad syntax")
        except psycopg.errors.SyntaxError as e:
            expect(e.sqlstate == "42601", f"sqlstate {e.sqlstate!r}")
        except psycopg.Error as e:
            raise CheckFailed(f"{type(e).__name__} sqlstate={e.sqlstate!r}: {e}; expected 42601")

    def unknown_column(self):
        try:
            self.conn.execute(f"SELECT nope FROM {self.stream} WHERE id > %s LIMIT 1", (0,))
            raise CheckFailed("no error for an unknown column")
        except psycopg.errors.UndefinedColumn as e:
            expect(e.sqlstate == "42703", f"sqlstate {e.sqlstate!r}")
        except psycopg.Error as e:
            raise CheckFailed(f"{type(e).__name__} sqlstate={e.sqlstate!r}: {e}; expected 42703")

    def _named_cursor(self, name, binary, read_all):
        self.conn.autocommit = False
        started = time.monotonic()
        with self.conn.transaction():
            with self.conn.cursor(name=name, binary=binary) as cur:
                cur.execute(f"SELECT auction, bidder, price FROM {self.bids}")
                names = [d.name for d in cur.description or []]
                expect(names == ["auction", "bidder", "price"], f"cursor description {names}")
                seen = 0
                for chunk in range(3):
                    batch = cur.fetchmany(10)
                    expect(len(batch) == 10, f"chunk {chunk}: {len(batch)} rows, expected 10")
                    for r in batch:
                        expect(
                            len(r) == 3 and all(type(v) is int and v > 0 for v in r),
                            f"chunk {chunk}: row {r!r}, expected three positive ints",
                        )
                    seen += len(batch)
                if read_all:
                    seen += len(cur.fetchall())
                    expect(seen == NEXMARK_BIDS, f"read {seen} bids in all, expected {NEXMARK_BIDS}")
        status = self.conn.info.transaction_status
        expect(status == TransactionStatus.IDLE, f"status after the transaction {status.name}")
        expect(time.monotonic() - started < 60, "the cursor took over a minute")

    def server_side_cursor(self):
        self._named_cursor("c", binary=False, read_all=True)

    def server_side_cursor_binary_closed_early(self):
        self._named_cursor("c_bin", binary=True, read_all=False)

    def cleanup(self):
        self.conn.execute(f"DROP STREAM IF EXISTS {self.stream}")
        self.conn.execute(f"DROP STREAM IF EXISTS {self.inserted}")
        self.conn.execute(f"DROP STREAM IF EXISTS {self.bids}")


STEPS = [
    ("server version", Check.server_version),
    ("create streams, INSERT literal rows", Check.create_streams),
    ("catalog: pg_type, TypeInfo.fetch, information_schema, pg_class", Check.catalog),
    ("executemany INSERT with datetime params", Check.executemany_insert),
    ("multi-row INSERT with %s params", Check.multirow_insert),
    ("INSERT with a timestamp given as a string", Check.text_timestamp_insert),
    ("read back the parameterised INSERTs", Check.read_back_inserts),
    ("LIMIT query with a %s param (text results)", Check.query_text_results),
    ("LIMIT query with a %s param (binary results)", Check.query_binary_results),
    ("LIMIT query with a string param", Check.query_string_param),
    ("LIMIT query with a datetime param", Check.query_timestamp_param),
    ("unknown stream raises UndefinedTable; usable after rollback", Check.unknown_stream),
    ("statements in a failed transaction get 25P02", Check.failed_transaction_refuses_statements),
    ("syntax error is 42601", Check.syntax_error),
    ("unknown column is 42703", Check.unknown_column),
    ("server-side cursor 'c' with fetchmany(10)", Check.server_side_cursor),
    ("binary server-side cursor closed early", Check.server_side_cursor_binary_closed_early),
    ("cleanup", Check.cleanup),
]


def main():
    if len(sys.argv) != 2:
        print("usage: psycopg_check.py PORT", file=sys.stderr)
        sys.exit(2)
    port = int(sys.argv[1])
    print(f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}), libpq {psycopg.pq.version()}")
    try:
        conn = psycopg.connect(
            host="127.0.0.1", port=port, user="sluice", dbname="sluice", connect_timeout=10, autocommit=True
        )
    except Exception as e:  # noqa: BLE001
        print(f"psycopg check FAILED at connect: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

    check = Check(conn)
    failures = []
    for name, step in STEPS:
        if conn.closed:
            failures.append((name, "the connection is closed"))
            continue
        check.reset()
        try:
            step(check)
            print(f"  ok    {name}")
        except CheckFailed as e:
            failures.append((name, str(e)))
        except Exception as e:  # noqa: BLE001
            detail = f"unexpected {type(e).__name__}"
            if isinstance(e, psycopg.Error) and e.sqlstate:
                detail += f" (sqlstate {e.sqlstate})"
            failures.append((name, f"{detail}: {e}"))
            if not isinstance(e, psycopg.Error):
                traceback.print_exc()
        if failures and failures[-1][0] == name:
            print(f"  FAIL  {name}")
    conn.close()

    for name, message in failures:
        print(f"psycopg check FAILED at {name}: {message}", file=sys.stderr)
    if failures:
        print(f"psycopg: {len(failures)} of {len(STEPS)} steps failed", file=sys.stderr)
        sys.exit(1)
    print("psycopg: ok")


if __name__ == "__main__":
    main()
