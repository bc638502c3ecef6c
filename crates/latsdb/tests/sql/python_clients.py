#!/usr/bin/env python3
"""Drives the SQL node with the two Python MySQL drivers, PyMySQL and
mysql-connector-python (its pure-Python implementation, and its C extension
where that loads).

    python_clients.py HOST PORT

Run by tests/sql_python.rs with the interpreter of target/pyenv
(scripts/install-deps.sh installs scripts/requirements-sql-clients.txt
there). For each driver: connect with the driver's default settings
(autocommit off for both), create a database and a table of many column
types, insert with executemany, read typed values back, update, delete,
commit and roll back, prepared statements (mysql-connector-python), a
duplicate key after which the connection still works, and drop the
database. Each driver stops at its first mismatch, which is printed to
stderr; the program exits non-zero when any driver failed and prints one
line per driver that passed.
"""

import datetime
import sys
import traceback
from decimal import Decimal


class Mismatch(Exception):
    pass


def check(what, got, want):
    if got != want or type(got) is not type(want):
        raise Mismatch(f"{what}: got {got!r} ({type(got).__name__}), want {want!r} ({type(want).__name__})")


def check_rows(what, got, want, bytearrays=False):
    """Exact values and Python types, row by row. bytearrays: binary values
    may come as bytearray (the C extension's prepared cursor returns them
    so whatever the server sends)."""
    got = [tuple(bytes(v) if bytearrays and isinstance(v, bytearray) else v for v in r) for r in got]
    if len(got) != len(want):
        raise Mismatch(f"{what}: got {len(got)} rows {got!r}, want {len(want)} rows {want!r}")
    for i, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(w):
            raise Mismatch(f"{what}: row {i} has {len(g)} columns {g!r}, want {len(w)} {w!r}")
        for j, (gv, wv) in enumerate(zip(g, w)):
            check(f"{what}: row {i} column {j}", gv, wv)


CREATE_TABLE = """
CREATE TABLE items (
  id INT NOT NULL AUTO_INCREMENT,
  big BIGINT NOT NULL,
  name VARCHAR(40) NOT NULL,
  code CHAR(4) NOT NULL,
  price DECIMAL(10,2) NOT NULL,
  score DOUBLE,
  born DATE,
  seen DATETIME,
  flag BOOLEAN,
  small TINYINT,
  note TEXT,
  raw VARBINARY(16),
  blobby BLOB,
  stamp TIMESTAMP NULL,
  PRIMARY KEY (id)
)
"""

COLUMNS = "big, name, code, price, score, born, seen, flag, small, note, raw, blobby, stamp"
PLACEHOLDERS = ", ".join(["%s"] * len(COLUMNS.split(", ")))

# The rows executemany inserts (ids 1..=3 from AUTO_INCREMENT). The binary
# values hold bytes that are not UTF-8, as binary data does.
ROWS = [
    (
        9007199254740993,
        "alpha",
        "AB12",
        Decimal("10.50"),
        1.25,
        datetime.date(2026, 1, 2),
        datetime.datetime(2026, 1, 2, 3, 4, 5),
        True,
        -7,
        "first note",
        b"\x00\x01\xfe\xff",
        b"\x00blob\xff'\\",
        datetime.datetime(2026, 1, 2, 3, 4, 5),
    ),
    (
        -42,
        "bêta ünïcødé",
        "CD",
        Decimal("-0.99"),
        -3.5e100,
        datetime.date(1999, 12, 31),
        datetime.datetime(1999, 12, 31, 23, 59, 59),
        False,
        127,
        "it's \"quoted\" \\ and\nnew line",
        b"",
        b"",
        datetime.datetime(1999, 12, 31, 23, 59, 59),
    ),
    (0, "gamma", "EF", Decimal("12345678.90"), None, None, None, None, None, None, None, None, None),
]


def expected_row(i):
    """ROWS[i] as SELECT returns it: BOOLEAN is TINYINT(1), so an int."""
    r = list(ROWS[i])
    if r[7] is not None:
        r[7] = int(r[7])
    return tuple([i + 1] + r)


def set_autocommit(conn, on):
    """PyMySQL has a method, mysql-connector-python a property."""
    if callable(getattr(conn, "autocommit", None)):
        conn.autocommit(on)
    else:
        conn.autocommit = on


def duplicate_errno(name, e):
    return e.args[0] if name == "pymysql" else e.errno


def expect_duplicate(name, errors, how, cursor, row):
    """An insert of a taken key raises IntegrityError with errno 1062."""
    try:
        cursor.execute("INSERT INTO items (id, big, name, code, price) VALUES (%s, %s, %s, %s, %s)", row)
    except errors.IntegrityError as e:
        check(f"{how} duplicate key errno", duplicate_errno(name, e), 1062)
    else:
        raise Mismatch(f"a {how} duplicate key insert raised no IntegrityError")


def exercise(name, errors, connect, prepared_cursor=None, prepared_bytearrays=False):
    db = f"pyclient_{name}"
    conn = connect(None)
    cur = conn.cursor()

    cur.execute("SELECT 1 + 1, 'x', NULL")
    check_rows("SELECT 1 + 1, 'x', NULL", cur.fetchall(), [(2, "x", None)])

    cur.execute(f"DROP DATABASE IF EXISTS {db}")
    cur.execute(f"CREATE DATABASE {db}")
    cur.execute(f"USE {db}")
    cur.execute(CREATE_TABLE)

    # Parameterised multi-row insert (both drivers send one INSERT with
    # three rows, the values inlined into the query text).
    cur.executemany(f"INSERT INTO items ({COLUMNS}) VALUES ({PLACEHOLDERS})", ROWS)
    check("executemany rowcount", cur.rowcount, 3)
    conn.commit()

    # lastrowid of a single-row insert.
    cur.execute(
        "INSERT INTO items (big, name, code, price) VALUES (%s, %s, %s, %s)",
        (1, "delta", "GH", Decimal("1.00")),
    )
    check("INSERT rowcount", cur.rowcount, 1)
    check("lastrowid", cur.lastrowid, 4)
    conn.commit()

    # Typed values back, with parameters in the WHERE clause.
    cur.execute(f"SELECT id, {COLUMNS} FROM items WHERE id <= %s ORDER BY id", (3,))
    check_rows("SELECT all columns", cur.fetchall(), [expected_row(0), expected_row(1), expected_row(2)])
    cur.execute("SELECT name FROM items WHERE name = %s", ("bêta ünïcødé",))
    check_rows("SELECT by a non-ASCII string", cur.fetchall(), [("bêta ünïcødé",)])
    cur.execute("SELECT id FROM items WHERE raw = %s", (b"\x00\x01\xfe\xff",))
    check_rows("SELECT by binary", cur.fetchall(), [(1,)])
    cur.execute(
        "SELECT id, price FROM items WHERE price > %s AND seen < %s AND born = %s ORDER BY id",
        (Decimal("0"), datetime.datetime(2030, 1, 1), datetime.date(2026, 1, 2)),
    )
    check_rows("SELECT by decimal, datetime and date", cur.fetchall(), [(1, Decimal("10.50"))])
    cur.execute("SELECT id FROM items WHERE stamp = %s", (datetime.datetime(2026, 1, 2, 3, 4, 5),))
    check_rows("SELECT by a TIMESTAMP", cur.fetchall(), [(1,)])
    cur.execute("SELECT id FROM items WHERE id IN (SELECT id FROM items WHERE big <= %s) ORDER BY id", (0,))
    check_rows("SELECT with a subquery", cur.fetchall(), [(2,), (3,)])
    cur.execute("SELECT id FROM items WHERE score IS NULL AND note IS NULL ORDER BY id")
    check_rows("SELECT by NULL", cur.fetchall(), [(3,), (4,)])
    cur.execute("SELECT COUNT(*), SUM(price), MAX(big) FROM items")
    check_rows("COUNT, SUM and MAX", cur.fetchall(), [(4, Decimal("12345689.41"), 9007199254740993)])

    # A DATETIME without digits of a second rounds a written value to whole
    # seconds, half up, as MySQL does.
    cur.execute("UPDATE items SET seen = %s WHERE id = %s", (datetime.datetime(2026, 5, 6, 7, 8, 9, 600000), 4))
    cur.execute("SELECT seen FROM items WHERE id = %s", (4,))
    check_rows("DATETIME rounds to whole seconds", cur.fetchall(), [(datetime.datetime(2026, 5, 6, 7, 8, 10),)])

    # UPDATE and DELETE rowcounts.
    cur.execute("UPDATE items SET score = %s WHERE big >= %s", (2.5, 0))
    check("UPDATE rowcount", cur.rowcount, 3)
    # Without CLIENT_FOUND_ROWS (neither driver asks for it) the count is of
    # rows changed, not rows matched: rows 1 and 3 already hold 2.5.
    cur.execute("UPDATE items SET score = %s WHERE id IN (1, 2, 3)", (2.5,))
    check("UPDATE rowcount of rows changed", cur.rowcount, 1)
    for i, row in enumerate(ROWS):
        cur.execute("UPDATE items SET score = %s WHERE id = %s", (row[4], i + 1))
    cur.execute("DELETE FROM items WHERE id = %s", (4,))
    check("DELETE rowcount", cur.rowcount, 1)
    cur.execute("DELETE FROM items WHERE id = %s", (404,))
    check("DELETE of no row rowcount", cur.rowcount, 0)
    conn.commit()

    # A transaction committed, one rolled back (autocommit is off).
    set_autocommit(conn, False)
    if name.startswith("connector"):
        # The driver's own API: reading the setting asks the server
        # (SELECT @@session.autocommit); start_transaction() refuses when the
        # server's status says a transaction is open. A SELECT of no table
        # opens none.
        check("conn.autocommit", conn.autocommit, False)
        check("in_transaction after SELECT @@session.autocommit", conn.in_transaction, False)
        conn.start_transaction()
        check("in_transaction after start_transaction()", conn.in_transaction, True)
    cur.execute("INSERT INTO items (big, name, code, price) VALUES (%s, %s, %s, %s)", (5, "kept", "K", Decimal("5")))
    kept_id = cur.lastrowid
    conn.commit()
    cur.execute("INSERT INTO items (big, name, code, price) VALUES (%s, %s, %s, %s)", (6, "gone", "G", Decimal("6")))
    gone_id = cur.lastrowid
    cur.execute("UPDATE items SET name = %s WHERE id = %s", ("changed", 1))
    cur.execute("SELECT name FROM items WHERE id = %s", (1,))
    check_rows("uncommitted change seen by a key lookup in its own transaction", cur.fetchall(), [("changed",)])
    # Scans see the transaction's own changes too.
    cur.execute("SELECT id, name FROM items ORDER BY id")
    check_rows(
        "uncommitted changes seen by a scan in their own transaction",
        cur.fetchall(),
        [(1, "changed"), (2, "bêta ünïcødé"), (3, "gamma"), (kept_id, "kept"), (gone_id, "gone")],
    )
    cur.execute("UPDATE items SET small = %s WHERE big = %s", (1, 6))
    check("UPDATE by a scan of a row inserted in the same transaction: rowcount", cur.rowcount, 1)
    conn.rollback()
    cur.execute("SELECT id, name FROM items ORDER BY id")
    check_rows(
        "rows after commit and rollback",
        cur.fetchall(),
        [(1, "alpha"), (2, "bêta ünïcødé"), (3, "gamma"), (kept_id, "kept")],
    )
    # A second connection sees only what was committed.
    other = connect(db)
    ocur = other.cursor()
    ocur.execute("SELECT COUNT(*) FROM items")
    check_rows("COUNT from a second connection", ocur.fetchall(), [(4,)])
    other.close()
    conn.commit()

    # SHOW PROCESSLIST lists the connections; KILL ends another one, and
    # its open transaction rolls back.
    other = connect(db)
    set_autocommit(other, False)
    ocur = other.cursor()
    ocur.execute("INSERT INTO items (big, name, code, price) VALUES (%s, %s, %s, %s)", (9, "killed", "K", Decimal("9")))
    ocur.execute("SELECT CONNECTION_ID()")
    other_id = ocur.fetchall()[0][0]
    cur.execute("SELECT CONNECTION_ID()")
    own_id = cur.fetchall()[0][0]
    cur.execute("SHOW PROCESSLIST")
    listed = {row[0]: tuple(row) for row in cur.fetchall()}
    if other_id not in listed or own_id not in listed:
        raise Mismatch(f"SHOW PROCESSLIST lacks connection {other_id} or {own_id}: {listed}")
    check("the other connection in SHOW PROCESSLIST (user, db, command, info)",
          tuple(listed[other_id][i] for i in (1, 3, 4, 7)), ("root", db, "Sleep", None))
    check("this connection in SHOW PROCESSLIST (command, info)",
          tuple(listed[own_id][i] for i in (4, 7)), ("Query", "SHOW PROCESSLIST"))
    cur.execute("KILL %s", (other_id,))
    try:
        ocur.execute("SELECT 1")
        ocur.fetchall()
    except Exception as e:  # the drivers' "lost connection" errors differ
        if isinstance(e, Mismatch):
            raise
    else:
        raise Mismatch("a killed connection still answered")
    cur.execute("SELECT COUNT(*) FROM items WHERE name = 'killed'")
    check_rows("the killed connection's insert rolled back", cur.fetchall(), [(0,)])
    cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (other_id,))
    check_rows("a killed connection leaves the process list", cur.fetchall(), [(0,)])
    conn.commit()

    # Server-side prepared statements (COM_STMT_PREPARE / EXECUTE, binary rows).
    if prepared_cursor is not None:
        pcur = prepared_cursor(conn)
        pcur.execute(f"SELECT id, {COLUMNS} FROM items WHERE id = %s", (1,))
        check_rows("prepared SELECT", pcur.fetchall(), [expected_row(0)], prepared_bytearrays)
        pcur.execute(f"SELECT id, {COLUMNS} FROM items WHERE id = %s", (2,))
        check_rows("prepared SELECT, executed again", pcur.fetchall(), [expected_row(1)], prepared_bytearrays)
        pcur.execute(f"SELECT id, {COLUMNS} FROM items WHERE id = %s", (3,))
        check_rows("prepared SELECT of NULLs", pcur.fetchall(), [expected_row(2)], prepared_bytearrays)
        pcur.execute(
            f"INSERT INTO items ({COLUMNS}) VALUES ({PLACEHOLDERS})",
            (7, "prep", "PR", Decimal("7.77"), 0.5, datetime.date(2000, 2, 29),
             datetime.datetime(2000, 2, 29, 12, 0, 1), True, 1, "p", b"\x01\xff", b"\x02", None),
        )
        check("prepared INSERT rowcount", pcur.rowcount, 1)
        prep_id = pcur.lastrowid
        # AUTO_INCREMENT values of rolled-back inserts are not handed out again.
        if not isinstance(prep_id, int) or prep_id <= kept_id:
            raise Mismatch(f"prepared INSERT lastrowid: got {prep_id!r}, want an int above {kept_id}")
        pcur.execute("SELECT price, born, seen, raw, flag FROM items WHERE id = %s", (prep_id,))
        check_rows(
            "prepared SELECT of a prepared INSERT",
            pcur.fetchall(),
            [(Decimal("7.77"), datetime.date(2000, 2, 29), datetime.datetime(2000, 2, 29, 12, 0, 1), b"\x01\xff", 1)],
            prepared_bytearrays,
        )
        pcur.execute("SELECT id FROM items WHERE raw = %s AND seen = %s", (b"\x01\xff", datetime.datetime(2000, 2, 29, 12, 0, 1)))
        check_rows("prepared SELECT by binary and datetime", pcur.fetchall(), [(prep_id,)])
        pcur.execute("UPDATE items SET small = small + %s WHERE id = %s", (1, prep_id))
        check("prepared UPDATE rowcount", pcur.rowcount, 1)
        pcur.execute("DELETE FROM items WHERE id = %s", (prep_id,))
        check("prepared DELETE rowcount", pcur.rowcount, 1)
        # A parameter inside a subquery, and one after it.
        pcur.execute(
            "SELECT id FROM items WHERE id IN (SELECT id FROM items WHERE big <= %s) AND id < %s ORDER BY id", (0, 3)
        )
        check_rows("prepared SELECT with a subquery", pcur.fetchall(), [(2,)])
        pcur.execute("SELECT name FROM items WHERE big = (SELECT MAX(big) FROM items WHERE id <= %s)", (3,))
        check_rows("prepared SELECT with a scalar subquery", pcur.fetchall(), [("alpha",)], prepared_bytearrays)
        pcur.execute("SELECT id FROM items WHERE id = %s UNION SELECT id FROM items WHERE id <= %s ORDER BY id DESC", (1, 2))
        check_rows("prepared UNION", pcur.fetchall(), [(2,), (1,)])
        # What Django sends for count() of a sliced queryset.
        pcur.execute("SELECT COUNT(*) FROM (SELECT id FROM items WHERE big <= %s LIMIT 5) subquery", (0,))
        check_rows("prepared SELECT from a derived table", pcur.fetchall(), [(2,)])
        expect_duplicate(name, errors, "prepared", pcur, (2, 0, "d", "D", 0))
        conn.rollback()
        pcur.close()

    # Duplicate key: IntegrityError 1062, and the connection still works. As
    # in MySQL, the error undoes the failed statement only: the transaction
    # around it (autocommit is off) goes on and commits what came before.
    cur.execute("INSERT INTO items (big, name, code, price) VALUES (%s, %s, %s, %s)", (8, "before", "B", Decimal("8")))
    before_id = cur.lastrowid
    expect_duplicate(name, errors, "text", cur, (1, 0, "dup", "D", 0))
    cur.execute("SELECT COUNT(*) FROM items WHERE id = %s", (1,))
    check_rows("after the error the transaction goes on", cur.fetchall(), [(1,)])
    conn.commit()
    cur.execute("SELECT id, name FROM items WHERE id IN (%s, %s) ORDER BY id", (1, before_id))
    check_rows("the duplicate left the row as it was and the insert before it committed", cur.fetchall(),
               [(1, "alpha"), (before_id, "before")])
    conn.commit()

    cur.execute(f"DROP DATABASE {db}")
    conn.commit()
    cur.execute("SHOW DATABASES")
    if (db,) in [tuple(r) for r in cur.fetchall()]:
        raise Mismatch(f"DROP DATABASE left {db} behind")
    cur.close()
    conn.close()


def run_pymysql(host, port):
    import pymysql

    def connect(db):
        return pymysql.connect(host=host, port=port, user="root", password="", database=db, charset="utf8mb4")

    exercise("pymysql", pymysql.err, connect)
    return f"PyMySQL {pymysql.VERSION_STRING}"


def run_connector(host, port, use_pure):
    import mysql.connector

    def connect(db):
        kw = dict(host=host, port=port, user="root", password="", use_pure=use_pure)
        if db:
            kw["database"] = db
        return mysql.connector.connect(**kw)

    exercise(
        "connector_pure" if use_pure else "connector_cext",
        mysql.connector.errors,
        connect,
        prepared_cursor=lambda c: c.cursor(prepared=True),
        prepared_bytearrays=not use_pure,
    )
    return f"mysql-connector-python {mysql.connector.__version__} ({'pure Python' if use_pure else 'C extension'})"


def main():
    if len(sys.argv) != 3:
        print("usage: python_clients.py HOST PORT", file=sys.stderr)
        return 2
    host, port = sys.argv[1], int(sys.argv[2])
    runs = [
        ("PyMySQL", lambda: run_pymysql(host, port)),
        ("mysql-connector-python (pure Python)", lambda: run_connector(host, port, True)),
    ]
    import mysql.connector

    if mysql.connector.HAVE_CEXT:
        runs.append(("mysql-connector-python (C extension)", lambda: run_connector(host, port, False)))
    else:
        print("mysql-connector-python: its C extension does not load here; only the pure-Python one runs")
    failed = 0
    for label, run in runs:
        try:
            print(f"ok {run()}", flush=True)
        except Mismatch as e:
            print(f"FAIL {label}: {e}", file=sys.stderr, flush=True)
            failed += 1
        except Exception as e:
            print(f"FAIL {label}: unexpected {type(e).__module__}.{type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
