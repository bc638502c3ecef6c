"""Differential SQL test: the same random schema, data, queries and writes
against latsdb's SQL node and against MariaDB, compared answer by answer.

    differential.py LATSDB_HOST:PORT MARIADB_HOST:PORT [--seed S] [--queries N]
        [--writes N] [--mariadb-user U] [--mariadb-password P] [--verbose]

Queries are drawn from a grammar of what applications send (expressions of
every column type, NULLs, predicates, joins, grouping, DISTINCT, ORDER BY
with LIMIT, subqueries, set operations); a quarter of the queries run as
server-side prepared statements on latsdb (mysql-connector-python, literals
as parameters, binary rows) against the same text on MariaDB. Writes are
INSERT, UPDATE, DELETE, REPLACE and INSERT ... ON DUPLICATE KEY UPDATE
(also from a SELECT), multi-table UPDATE and DELETE, some inside
transactions with savepoints that commit or roll back, a quarter of the
others as prepared statements, and after each the tables are
compared whole. A write that both refuse inside a transaction fails
alone and the transaction goes on (the tables, each as its transaction sees
them, are compared); one that ends latsdb's transaction (an error from the
cluster, as in NDB) where MariaDB undoes the statement alone makes both
roll back, and it is counted apart. A result is compared as a multiset of rows,
or as a sequence when the query orders by every column it returns. Numbers
compare by value (a DECIMAL 2.5000 equals 2.5), so a difference in display
scale alone is not reported.

Exit status 0 when every answer matched; 1 with each mismatch printed
(the seed, the statement, both answers) otherwise. A statement latsdb
refuses that MariaDB runs is reported apart ("unsupported") and fails the
run only with --strict.
"""

import argparse
import datetime
import decimal
import random
import re
import sys

import mysql.connector
import pymysql

INT_COLS = {"t1": ["id", "a", "b"], "t2": ["id", "t1_id", "x"]}
STR_COLS = {"t1": ["s"], "t2": ["s"]}
DEC_COLS = {"t1": ["d"], "t2": []}
DATE_COLS = {"t1": ["dt"], "t2": []}

SCHEMA = [
    "CREATE TABLE t1 (id INT NOT NULL PRIMARY KEY, a INT, b BIGINT, s VARCHAR(20), d DECIMAL(10,2),"
    " dt DATE, KEY ka (a), KEY ks (s))",
    "CREATE TABLE t2 (id INT NOT NULL PRIMARY KEY, t1_id INT, x INT NOT NULL DEFAULT 7, s VARCHAR(20),"
    " KEY kt (t1_id, x))",
    # The other column types, queried by their own grammar (`Gen.t3_query`).
    "CREATE TABLE t3 (id INT NOT NULL PRIMARY KEY, u INT UNSIGNED, ti TINYINT, f DOUBLE, c CHAR(6), ts DATETIME,"
    " flag BOOLEAN, big BIGINT UNSIGNED, KEY kf (f), KEY kts (ts), KEY kc (c))",
    # Case-insensitive text (the table's collation; `note` is compared as
    # bytes), keyed by a text primary key and a unique index; queried by
    # `Gen.t4_query`.
    "CREATE TABLE t4 (code VARCHAR(12) NOT NULL PRIMARY KEY, id INT NOT NULL, name VARCHAR(16), n INT,"
    " note VARCHAR(10) COLLATE utf8mb4_bin, UNIQUE KEY uid (id), KEY kn (name)) COLLATE utf8mb4_general_ci",
]
TABLES = ["t1", "t2", "t3", "t4"]
# Doubles that binary fractions hold exactly, so sums do not depend on order.
DOUBLES = ["1.5", "-2.25", "0.5", "100", "-0.125", "3e3", "1e6", "0"]

NEEDLES = ["'a'", "'pp'", "''", "'an'"]
# Date formats STR_TO_DATE reads back, and texts some of them fit (no empty
# text or February 30th: MariaDB makes them the zero date and a date that
# does not exist, where MySQL 8 and latsdb answer NULL).
DATE_FORMATS = ["%d/%m/%Y", "%Y-%m-%d", "%M %e, %Y", "%y%m%d", "%Y-%j", "%b %D %Y"]
DATE_TEXTS = ["01/02/2024", "February 29, 2024", "240229", "2024-060", "Mar 3rd 2024", "13/13/2024", "2024-02-28"]
# Patterns MySQL's ICU, MariaDB's PCRE and latsdb's engine read alike.
REGEXPS = ["'^a'", "'e$'", "'an+'", "'^$'", "'p|g'", "'^[A-Z]'", "'[aeiou]{2}'", "'_'", "'^.{4}$'", "'(an)+a'"]
# t4's texts: words whose case and accents vary between rows and literals.
# Names repeat, so they vary in case only: UPPER shows two names that weigh
# the same alike, whichever of them a system keeps for a group.
CI_WORDS = ["apple", "Banana", "cherry", "crème", "Über", "zoë", "fig", "date"]
CI_NAMES = ["ann", "Ann", "ANN", "bob", "BoB", "zoe", "ZOE", ""]
# CHAR(6) values, some with trailing spaces (which a CHAR drops).
CHARS = ["ab", "abc ", "b", "", "a ", "zz", "Ab", "a_b", "bab"]
WORDS = ["apple", "Apple", "banana", "cherry", "date", "elder", "fig", "grape", "", "a_b", "x%y", "kiwi"]


def exact_spread(f, col, over=""):
    """A variance or standard deviation of `col` (integers, or DECIMALs of
    two places) as the integer it is times the count squared (or times
    count * (count - 1) for the sample forms) and 10,000: MariaDB shows a
    variance with only 4 more decimals than its argument, and the last bits
    of a double depend on the order the rows come in, which a rounding of
    the plain value can tip either way."""
    count = f"COUNT({col}){' ' + over if over else ''}"
    value = f"{f}({col}){' ' + over if over else ''}"
    if f.startswith("STD"):
        value = f"POW({value}, 2)"
    scale = f"{count} * ({count} - 1)" if f.endswith("SAMP") else f"{count} * {count}"
    return f"ROUND({value} * {scale} * 10000)"


class Gen:
    def __init__(self, rng):
        self.r = rng
        # Off for set operations: MariaDB shows all nine digits it keeps of
        # a quotient when a UNION column is typed as text.
        self.division = True
        self.writing = False
        # A comma join's link condition, ANDed into the query's WHERE.
        self.link = None
        # While a prepared statement is generated: the values its literals
        # became parameters of (None otherwise).
        self.params = None

    def chance(self, p):
        return self.r.random() < p

    def pick(self, xs):
        return self.r.choice(xs)

    # ---- literals ----
    def int_lit(self):
        v = self.r.choice([0, 1, 2, 3, 5, 7, 10, -1, -4, 42, 100])
        if self.params is not None and self.chance(0.5):
            self.params.append(v)
            return f"\x00{len(self.params) - 1}\x00"
        return str(v)

    def str_lit(self):
        w = self.pick(WORDS)
        if self.params is not None and self.chance(0.5):
            self.params.append(w)
            return f"\x00{len(self.params) - 1}\x00"
        return "'" + w.replace("'", "''") + "'"

    def dec_lit(self):
        return self.pick(["1.50", "0.25", "-3.75", "10.00", "2"])

    def date_lit(self):
        return "DATE '%s'" % (datetime.date(2024, 1, 1) + datetime.timedelta(days=self.r.randrange(0, 60)))

    # ---- expressions, by type ----
    def col(self, tables, kind):
        pools = {"int": INT_COLS, "str": STR_COLS, "dec": DEC_COLS, "date": DATE_COLS}[kind]
        options = [f"{t}.{c}" for t in tables for c in pools[t]]
        return self.pick(options) if options else None

    def expr(self, tables, kind, depth=0):
        leaf = depth >= 2 or self.chance(0.45)
        c = self.col(tables, kind)
        if leaf:
            if c and self.chance(0.75):
                return c
            return {"int": self.int_lit, "str": self.str_lit, "dec": self.dec_lit, "date": self.date_lit}[kind]()
        d = depth + 1
        e = lambda k=kind: self.expr(tables, k, d)  # noqa: E731
        if kind == "int":
            return self.pick(
                [
                    lambda: f"({e()} + {e()})",
                    lambda: f"({e()} - {e()})",
                    lambda: f"({e()} * {self.int_lit()})",
                    lambda: f"ABS({e()})",
                    lambda: f"-{e()}",
                    lambda: f"COALESCE({e()}, {self.int_lit()})",
                    lambda: f"IFNULL({e()}, {e()})",
                    lambda: f"CASE WHEN {self.pred(tables, d)} THEN {e()} ELSE {e()} END",
                    lambda: f"IF({self.pred(tables, d)}, {e()}, {e()})",
                    lambda: f"LENGTH({e('str')})",
                    lambda: f"CHAR_LENGTH({e('str')})",
                    lambda: f"MOD({e()}, {self.pick(['3', '7', '-2'])})",
                    lambda: f"({e()} % {self.pick(['4', '5'])})",
                    lambda: f"({e()} DIV {self.pick(['2', '3', '-5'])})",
                    lambda: f"GREATEST({e()}, {e()})",
                    lambda: f"LEAST({e()}, {e()})",
                    lambda: f"FLOOR({e('dec')})",
                    lambda: f"CEIL({e('dec')})",
                    lambda: f"YEAR({e('date')})",
                    lambda: f"MONTH({e('date')})",
                    lambda: f"DAY({e('date')})",
                    lambda: f"SIGN({e()})",
                    lambda: f"NULLIF({e()}, {self.int_lit()})",
                    lambda: f"DATEDIFF({e('date')}, {self.date_lit()})",
                    lambda: f"WEEK({e('date')}, {self.r.randint(0, 7)})",
                    # (Its last digits: MariaDB types YEARWEEK too narrowly for a
                    # quotient of it, and shows 202401 / 2 as 99999.9999.)
                    lambda: f"(YEARWEEK({e('date')}{self.pick(['', ', 1', ', 3', ', 6'])}) % 1000)",
                    lambda: f"WEEKOFYEAR({e('date')})",
                    lambda: f"EXTRACT({self.pick(['YEAR_MONTH', 'DAY_HOUR', 'DAY_MINUTE'])} FROM {e('date')})",
                    lambda: f"({self.pred(tables, d)})",
                ]
                # MariaDB's strict mode turns the warning of comparing a
                # word with a number into an error in writes only.
                + ([lambda: f"({e('str')} = {self.int_lit()})"] if not self.writing else [])
                + [
                    lambda: f"INSTR({e('str')}, {self.pick(NEEDLES)})",
                    lambda: f"LOCATE({self.pick(NEEDLES)}, {e('str')})",
                    lambda: f"({e()} IN ({self.int_lit()}, NULL))",
                    lambda: f"FIND_IN_SET({e('str')}, 'apple,fig,,kiwi')",
                    lambda: f"STRCMP({e('str')}, {e('str')})",
                    lambda: f"REGEXP_INSTR({e('str')}, {self.pick(REGEXPS)})",
                ]
                # (Not under an outer join: see ELT.)
                + ([lambda: f"FIELD({e('str')}, 'apple', 'fig', '')"] if len(tables) == 1 else [])
                + ([lambda: f"(SELECT {self.pick(['COUNT(*)', 'MAX(t2.x)', 'SUM(t2.x) + 1', 'MIN(t2.s) IS NULL'])}"
                    f" FROM t2 WHERE t2.t1_id = t1.id{self.pick(['', ' AND t2.x > 5'])})",
                    lambda: f"(SELECT t2.x FROM t2 WHERE t2.id = t1.a)"] if "t1" in tables and "t2" not in tables else [])
            )()
        if kind == "str":
            return self.pick(
                [
                    lambda: f"CONCAT({e()}, {e()})",
                    lambda: f"UPPER({e()})",
                    lambda: f"LOWER({e()})",
                    lambda: f"SUBSTRING({e()}, {self.r.randint(1, 3)}, {self.r.randint(1, 3)})",
                    lambda: f"SUBSTRING({e()}, {self.r.randint(-3, 3)})",
                    lambda: f"LEFT({e()}, {self.r.randint(0, 3)})",
                    lambda: f"RIGHT({e()}, {self.r.randint(0, 3)})",
                    lambda: f"TRIM({e()})",
                    lambda: f"REPLACE({e()}, 'a', 'o')",
                    lambda: f"COALESCE({e()}, {self.str_lit()})",
                    lambda: f"IF({self.pred(tables, d)}, {e()}, {e()})",
                    lambda: f"CAST({e('int')} AS CHAR)",
                    lambda: f"LPAD({e()}, {self.r.randint(0, 8)}, '*')",
                    lambda: f"REVERSE({e()})",
                    lambda: f"CONCAT_WS('-', {e()}, {e()})",
                    lambda: f"SUBSTRING_INDEX({e()}, {self.pick(['a', 'p', '_'])!r}, {self.pick(['1', '2', '-1', '0'])})",
                    lambda: f"INSERT({e()}, {self.r.randint(0, 4)}, {self.r.randint(-1, 3)}, 'XY')",
                    lambda: f"REGEXP_REPLACE({e()}, {self.pick(REGEXPS)}, {self.pick(['', '#', '-'])!r})",
                    # MariaDB answers '' where MySQL (and latsdb) answer NULL for no match.
                    lambda: f"NULLIF(REGEXP_SUBSTR({e()}, {self.pick(REGEXPS)}), '')",
                ]
                # (FIELD and ELT not under an outer join: MariaDB 10.11 takes them to
                # be NULL when a column of the NULL-extended table is, and drops rows.)
                + ([lambda: f"ELT({e('int')}, {e()}, {e()})"] if len(tables) == 1 else [])
            )()
        if kind == "dec":
            return self.pick(
                [
                    lambda: f"({e()} + {e('int')})",
                    lambda: f"({e()} - {e()})",
                    # (not by 0: MariaDB shows a negative decimal times 0 as -0.00 in text)
                    lambda: f"({e()} * {self.pick(['1', '2', '3', '-2', '10'])})",
                    lambda: f"ROUND({e()}, {self.r.randint(-1, 3)})",
                    lambda: f"TRUNCATE({e()}, {self.r.randint(0, 1)})",
                    lambda: f"ABS({e()})",
                    lambda: f"COALESCE({e()}, {self.dec_lit()})",
                ]
                # MySQL keeps more digits of a quotient than it shows, and
                # uses them in enclosing arithmetic: division stays outermost.
                + ([lambda: f"({e('int')} / {self.pick(['2', '3', '4', '7'])})"] if depth == 0 and self.division else [])
            )()
        return self.pick(
            [
                lambda: f"DATE_ADD({e()}, INTERVAL {self.r.randint(-40, 40)} DAY)",
                lambda: f"DATE_SUB({e()}, INTERVAL {self.r.randint(0, 3)} MONTH)",
                lambda: f"COALESCE({e()}, {self.date_lit()})",
                lambda: f"TIMESTAMPADD({self.pick(['DAY', 'WEEK', 'MONTH'])}, {self.int_lit()}, {e()})",
                lambda: f"MAKEDATE({self.pick(['2024', '24', '1999'])}, {e('int')})",
                lambda: f"DATE_ADD({e()}, INTERVAL {self.pick(['1-2', '-0-13', '3'])!r} YEAR_MONTH)",
                lambda: f"DATE(DATE_SUB({e()}, INTERVAL {self.pick(['1 12', '-2 30', '40'])!r} DAY_HOUR))",
            ]
            # Not in writes: MariaDB's strict mode makes a text that does not
            # fit an error there, where latsdb (as in a SELECT) gives NULL.
            + ([] if self.writing else [
                lambda: (lambda fmt: f"STR_TO_DATE(DATE_FORMAT({e()}, {fmt!r}), {fmt!r})")(self.pick(DATE_FORMATS)),
                lambda: f"STR_TO_DATE({self.pick(DATE_TEXTS)!r}, {self.pick(DATE_FORMATS)!r})",
            ])
        )()

    def pred(self, tables, depth=0):
        d = depth + 1
        kind = self.pick(["int", "int", "str", "dec", "date"])
        if kind not in ("int", "str") and not any(self.col(tables, kind) for _ in [0]):
            kind = "int"
        e = lambda k=kind: self.expr(tables, k, d)  # noqa: E731
        lit = {"int": self.int_lit, "str": self.str_lit, "dec": self.dec_lit, "date": self.date_lit}[kind]
        simple = [
            lambda: f"{e()} {self.pick(['=', '<>', '<', '<=', '>', '>=', '<=>'])} {e()}",
            lambda: f"{e()} {self.pick(['=', '<', '>='])} {lit()}",
            lambda: f"{e()} IS {self.pick(['', 'NOT '])}NULL",
            lambda: f"{e()} {self.pick(['', 'NOT '])}IN ({', '.join(lit() for _ in range(self.r.randint(1, 4)))})",
            lambda: f"{e()} {self.pick(['', 'NOT '])}BETWEEN {lit()} AND {lit()}",
        ]
        if kind == "int" and tables and self.chance(0.3):
            t = self.pick(tables)
            simple += [
                lambda: f"{t}.id IN ({', '.join(str(self.r.randint(0, 45)) for _ in range(self.r.randint(1, 5)))})",
                lambda: f"{t}.id BETWEEN {self.r.randint(0, 30)} AND {self.r.randint(10, 50)}",
                lambda: f"{t}.id {self.pick(['<', '>', '<=', '>='])} {self.r.randint(0, 45)}",
            ]
            if t == "t2":
                simple.append(lambda: f"t2.t1_id = {self.r.randint(0, 20)} AND t2.x {self.pick(['<', '>'])} 10")
                simple.append(lambda: f"(t2.t1_id, t2.x) {self.pick(['', 'NOT '])}IN ("
                              + ", ".join(f"({self.r.randint(0, 20)}, {self.r.randint(-5, 30)})" for _ in range(3)) + ")")
        if kind == "str":
            pattern = self.pick(["'a%'", "'%e'", "'%an%'", "'_i%'", "'A%'", "'%\\_%'", "'%'", "'fig'"])
            simple.append(lambda: f"{e()} {self.pick(['', 'NOT '])}LIKE {pattern}")
            simple.append(lambda: f"{e()} LIKE {self.pick(['a|_%', '%|%%', '|a%', 'x|%y'])!r} ESCAPE '|'")
            simple.append(lambda: f"{e()} {self.pick(['', 'NOT '])}{self.pick(['REGEXP', 'RLIKE'])} {self.pick(REGEXPS)}")
        if depth < 2:
            simple += [
                lambda: f"({self.pred(tables, d)} AND {self.pred(tables, d)})",
                lambda: f"({self.pred(tables, d)} OR {self.pred(tables, d)})",
                lambda: f"NOT ({self.pred(tables, d)})",
            ]
        if depth == 0 and "t2" not in tables and self.chance(0.15):
            simple += [
                lambda: f"t1.a {self.pick(['', 'NOT '])}IN (SELECT t2.x FROM t2 WHERE {self.pred(['t2'], 2)})",
                lambda: f"{self.pick(['', 'NOT '])}EXISTS (SELECT 1 FROM t2 WHERE t2.t1_id = t1.id"
                f" AND {self.pred(['t2'], 2)})",
                lambda: f"t1.a > (SELECT {self.pick(['MIN', 'MAX', 'COUNT'])}(t2.x) FROM t2"
                f" WHERE {self.pred(['t2'], 2)})",
                lambda: f"t1.a {self.pick(['=', '<>', '<', '>='])} {self.pick(['ANY', 'ALL', 'SOME'])}"
                f" (SELECT t2.{self.pick(['x', 't1_id'])} FROM t2 WHERE {self.pred(['t2'], 2)})",
            ]
        return self.pick(simple)()

    def any_expr(self, tables, kind=None):
        kind = kind or self.pick(["int", "int", "str", "dec", "date"])
        if not self.col(tables, kind):
            kind = "int"
        self.last_kind = kind
        return self.expr(tables, kind)

    # ---- queries ----
    def from_clause(self):
        self.link = None
        if self.chance(0.08):
            self.link = "t2.t1_id = t1.id"
            return ["t1", "t2"], self.pick(["t1, t2", "t2, t1"])
        if self.chance(0.35):
            join = self.pick(["JOIN", "LEFT JOIN", "JOIN"])
            on = "t2.t1_id = t1.id"
            if self.chance(0.3):
                on += f" AND {self.pred(['t2'], 1)}"
            return ["t1", "t2"], f"t1 {join} t2 ON {on}"
        t = self.pick(["t1", "t1", "t2"])
        return [t], t

    def query(self):
        if self.params is None and self.chance(0.15):
            return self.t3_query()
        if self.params is None and self.chance(0.12):
            return self.t4_query()
        k = self.r.random()
        if k < 0.05:
            inner, _ = self.simple_query(["t1"], "t1", alias_cols=True)
            return f"SELECT * FROM ({inner}) AS dt WHERE dt.c0 IS NOT NULL", False
        if k < 0.1:
            inner, _ = self.simple_query(["t2"], "t2", alias_cols=True)
            return f"WITH w AS ({inner}) SELECT COUNT(*), COUNT(c0), MIN(c0), MAX(c0) FROM w", False
        if k < 0.15:
            t = self.pick(["t1", "t2"])
            part = self.col([t], self.pick(["int", "str"]))
            f = self.pick(["ROW_NUMBER()", "RANK()", "DENSE_RANK()", f"SUM({t}.id)", "COUNT(*)", f"BIT_XOR({t}.id)",
                           f"BIT_OR({t}.id)", f"VAR_POP({t}.id)", f"STDDEV_SAMP({t}.id)"])
            order = f"{t}.id" if f in ("ROW_NUMBER()",) else f"{part}, {t}.id"
            over = f"OVER (PARTITION BY {part} ORDER BY {order})"
            window = f"{f} {over}"
            if f.startswith(("VAR", "STD")):
                window = exact_spread(f.split("(")[0], f"{t}.id", over)
            return f"SELECT {t}.id, {window} FROM {t}", False
        tables, frm = self.from_clause()
        if self.chance(0.3):
            where = f" WHERE {self.pred(tables)}" if self.chance(0.8) else ""
            return self.grouped(tables, frm, self.linked(where))
        return self.simple_query(tables, frm)

    def linked(self, where):
        """`where` with the comma join's link condition, if any (once)."""
        link, self.link = self.link, None
        if link is None:
            return where
        return f" WHERE {link} AND ({where[len(' WHERE '):]})" if where else f" WHERE {link}"

    def simple_query(self, tables, frm, alias_cols=False):
        where = self.linked(f" WHERE {self.pred(tables)}" if self.chance(0.8) else "")
        n = self.r.randint(1, 4)
        union = not alias_cols and len(tables) == 1 and self.chance(0.1)
        self.division = not union
        cols, kinds = [], []
        for _ in range(n):
            cols.append(self.any_expr(tables))
            kinds.append(self.last_kind)
        if alias_cols:
            cols = [f"{c} AS c{i}" for i, c in enumerate(cols)]
            return f"SELECT {', '.join(cols)} FROM {frm}{where}", False
        if union:
            other = self.pick(["t1", "t2"])
            # Columns of the same kinds on both sides: MariaDB 10.11 cuts a
            # number to the width of a short string column of the first
            # branch ('-2' under RIGHT(s, 1) becomes '-').
            sel2 = [self.any_expr([other], k) for k in kinds]
            op = self.pick(["UNION", "UNION ALL"])
            self.division = True
            return f"SELECT {', '.join(cols)} FROM {frm}{where} {op} SELECT {', '.join(sel2)} FROM {other}" \
                f" WHERE {self.pred([other])}", False
        return self.finish_query(tables, frm, where, cols)

    def finish_query(self, tables, frm, where, cols):
        n = len(cols)
        distinct = "DISTINCT " if self.chance(0.15) else ""
        sql = f"SELECT {distinct}{', '.join(cols)} FROM {frm}{where}"
        if self.chance(0.35):
            order = ", ".join(f"{i + 1}{self.pick(['', ' DESC'])}" for i in range(n))
            sql += f" ORDER BY {order}"
            ordered = True
            if self.chance(0.6):
                sql += f" LIMIT {self.r.randint(0, 8)}"
                # (MariaDB 10.11 answers DISTINCT over constants with an
                # OFFSET wrongly: one row where none is left.)
                if self.chance(0.4) and not distinct:
                    sql += f" OFFSET {self.r.randint(0, 5)}"
            return sql, ordered
        return sql, False

    def grouped(self, tables, frm, where):
        groups = [self.col(tables, self.pick(["int", "str"])) for _ in range(self.r.randint(0, 2))]
        groups = [g for g in dict.fromkeys(groups) if g]
        aggs = []
        for _ in range(self.r.randint(1, 3)):
            kind = self.pick(["int", "dec", "str", "int"])
            if not self.col(tables, kind):
                kind = "int"
            # An argument with a column: MariaDB types AVG of a constant too
            # narrowly (AVG(ABS(100)) is 99.9999 there).
            arg = self.expr(tables, kind, 1)
            while not any(c in arg for c in ("t1.", "t2.")):
                arg = self.expr(tables, kind, 1)
            f = self.pick(["COUNT", "SUM", "MIN", "MAX", "AVG", "COUNT(*)", "COUNT_DISTINCT", "GROUP_CONCAT",
                           "BIT_OR", "BIT_AND", "BIT_XOR", "STDDEV_POP", "VAR_SAMP", "STD", "VARIANCE"])
            if kind == "str" and f in ("SUM", "AVG", "STDDEV_POP", "VAR_SAMP", "STD", "VARIANCE"):
                f = "MAX"
            if kind != "int" and f.startswith("BIT_"):
                f = "MIN"
            if f == "COUNT(*)":
                aggs.append("COUNT(*)")
            elif f == "COUNT_DISTINCT":
                if self.chance(0.3):
                    aggs.append(f"COUNT(DISTINCT {arg}, {self.expr(tables, self.pick(['int', 'str']), 1)})")
                else:
                    aggs.append(f"COUNT(DISTINCT {arg})")
            elif f in ("STDDEV_POP", "VAR_SAMP", "STD", "VARIANCE"):
                small = [c for c in ("t1.a", "t1.d", "t2.x", "t2.t1_id") if c.split(".")[0] in tables]
                aggs.append(exact_spread(f, self.pick(small)) if small else "COUNT(*)")
            elif f == "GROUP_CONCAT":
                # Of a column, ordered by the value itself, so the text is the
                # same in both (latsdb types a computed value by itself, MariaDB
                # by the expression: COALESCE(d, 2) shows 2 as 2.00 there).
                arg = self.col(tables, kind)
                aggs.append(f"GROUP_CONCAT({arg} ORDER BY {arg} SEPARATOR ',')")
            else:
                aggs.append(f"{f}({arg})")
        sql = f"SELECT {', '.join(groups + aggs)} FROM {frm}{where}"
        if groups:
            sql += f" GROUP BY {', '.join(groups)}"
            if self.chance(0.3):
                sql += f" HAVING {self.pick(['COUNT(*) > 1', aggs[0] + ' IS NOT NULL', 'COUNT(*) < 3'])}"
            if self.chance(0.3):
                width = len(groups) + len(aggs)
                sql += " ORDER BY " + ", ".join(f"{i + 1}{self.pick(['', ' DESC'])}" for i in range(width))
                sql += f" LIMIT {self.r.randint(1, 6)}"
                return sql, True
        return sql, False

    # ---- t3: unsigned, tiny and big integers, doubles, CHAR, DATETIME, BOOLEAN ----
    def t3_expr(self, depth=0):
        """An expression over t3 and its kind ("int", "dbl", "str", "dt")."""
        if depth >= 2 or self.chance(0.4):
            return self.pick([("t3.u", "int"), ("t3.ti", "int"), ("t3.f", "dbl"), ("t3.c", "str"), ("t3.ts", "dt"),
                              ("t3.flag", "int"), ("t3.big", "int"), ("t3.id", "int")])
        d = depth + 1
        sub = lambda: self.t3_expr(d)[0]  # noqa: E731
        return self.pick([
            # (No subtraction from an unsigned column: MySQL refuses a
            # negative result, latsdb returns it.)
            lambda: (f"(t3.u + {self.pick(['1', '7', '4294967295'])})", "int"),
            # Below zero for some rows: error 1690 on both sides.
            lambda: (f"(t3.u - {self.pick(['1', '7'])})", "int"),
            lambda: (f"(t3.ti * {self.pick(['2', '-3', '100'])})", "int"),
            lambda: (f"(t3.ti - t3.id)", "int"),
            # (Nothing that overflows BIGINT UNSIGNED: MySQL evaluates the
            # select list only for the rows a LIMIT keeps, latsdb for all.)
            lambda: (f"(t3.big {self.pick(['DIV 2 + 1', '+ 0', '% 1000', 'DIV 3'])})", "int"),
            lambda: (f"(t3.{self.pick(['u', 'ti', 'id', 'flag', 'big'])} {self.pick(['&', '|', '^'])}"
                     f" {self.pick(['5', '255', '-1'])})", "int"),
            lambda: (f"(t3.{self.pick(['u', 'ti', 'id'])} {self.pick(['<<', '>>'])} {self.pick(['1', '3', '63', '64'])})", "int"),
            lambda: (f"~t3.{self.pick(['ti', 'u', 'flag'])}", "int"),
            lambda: (f"BIT_COUNT(t3.{self.pick(['u', 'ti', 'big'])})", "int"),
            lambda: (f"(t3.f {self.pick(['+', '-', '*'])} {self.pick(DOUBLES)})", "dbl"),
            lambda: (f"(t3.f * t3.ti)", "dbl"),
            lambda: (f"ABS(t3.f)", "dbl"),
            lambda: (f"FLOOR(t3.f)", "dbl"),
            lambda: (f"ROUND(t3.f, {self.pick(['0', '1', '-1'])})", "dbl"),
            lambda: (f"(t3.f > {self.pick(DOUBLES)})", "int"),
            lambda: (f"CONCAT('[', t3.c, ']')", "str"),
            lambda: (f"LENGTH(t3.c)", "int"),
            lambda: (f"UPPER(t3.c)", "str"),
            # (Not of a rounded double: MySQL shows ROUND(3000e0, 1) as 3000.0.)
            lambda: (f"CONCAT(t3.c, {self.pick(['t3.ti', 't3.u', 'DATE(t3.ts)', 't3.flag'])})", "str"),
            lambda: (f"DATE(t3.ts)", "dt"),
            lambda: (f"TIME(t3.ts)", "str"),
            lambda: (f"HOUR(t3.ts)", "int"),
            lambda: (f"DATE_FORMAT(t3.ts, '%Y-%m-%d %H.%i.%s %a')", "str"),
            lambda: (f"DATE_ADD(t3.ts, INTERVAL {self.r.randint(-50, 50)} {self.pick(['HOUR', 'MINUTE', 'DAY', 'MONTH'])})", "dt"),
            lambda: (f"TIMESTAMPDIFF({self.pick(['HOUR', 'DAY', 'MINUTE'])}, t3.ts, '2024-03-01 12:00:00')", "int"),
            lambda: (f"(t3.ts {self.pick(['<', '>=', '='])} '{self.t3_datetime()}')", "int"),
            # (Both branches of one kind: MySQL types the result by both.)
            lambda: (f"IF(t3.flag, {self.pick(['t3.c, UPPER(t3.c)', 't3.ti, t3.u', 't3.f, ABS(t3.f)', 't3.ts, DATE_ADD(t3.ts, INTERVAL 1 DAY)'])})", "str"),
            lambda: (f"(NOT t3.flag)", "int"),
            lambda: (f"(t3.flag IS {self.pick(['TRUE', 'FALSE', 'NOT TRUE'])})", "int"),
            lambda: (f"COALESCE(t3.f, t3.ti, -1)", "dbl"),
        ])()

    def t3_datetime(self):
        return str(datetime.datetime(2024, 2, 27, 0, 0) + datetime.timedelta(minutes=self.r.randrange(0, 6000) * 7))

    def t3_pred(self, depth=0):
        preds = [
            lambda: f"t3.f {self.pick(['<', '<=', '>', '>=', '='])} {self.pick(DOUBLES)}",
            lambda: f"t3.f BETWEEN {self.pick(DOUBLES)} AND {self.pick(DOUBLES)}",
            lambda: f"t3.ts {self.pick(['<', '>=', '='])} '{self.t3_datetime()}'",
            lambda: f"t3.ts BETWEEN '{self.t3_datetime()}' AND '{self.t3_datetime()}'",
            lambda: f"t3.ts {self.pick(['<', '>='])} '{self.t3_datetime()[:10]}'",
            lambda: f"t3.c {self.pick(['=', '<', '>=', '<>'])} '{self.pick(CHARS)}'",
            lambda: f"t3.c LIKE '{self.pick(['a%', '%b', '_', '%'])}'",
            lambda: f"t3.c IN ('{self.pick(CHARS)}', '{self.pick(CHARS)}')",
            lambda: f"t3.u {self.pick(['<', '>', '='])} {self.pick(['0', '7', '4294967295', '-1'])}",
            lambda: f"t3.ti {self.pick(['<', '>', '='])} {self.pick(['0', '-128', '127', '5'])}",
            lambda: f"t3.big {self.pick(['<', '>', '='])} {self.pick(['0', '9223372036854775808', '18446744073709551615', '-1'])}",
            lambda: f"t3.flag",
            lambda: f"NOT t3.flag",
            lambda: f"t3.{self.pick(['u', 'f', 'c', 'ts', 'flag', 'big'])} IS {self.pick(['', 'NOT '])}NULL",
            lambda: f"{self.t3_expr(1)[0]} IS NOT NULL",
        ]
        if depth < 1:
            preds += [
                lambda: f"({self.t3_pred(1)} AND {self.t3_pred(1)})",
                lambda: f"({self.t3_pred(1)} OR {self.t3_pred(1)})",
            ]
        return self.pick(preds)()

    def t3_query(self):
        where = f" WHERE {self.t3_pred()}" if self.chance(0.8) else ""
        if self.chance(0.25):
            group = self.pick(["t3.c", "t3.flag", "t3.ti", "DATE(t3.ts)"])
            aggs = [self.pick(["COUNT(*)", "SUM(t3.f)", "MIN(t3.f)", "MAX(t3.ts)", "MIN(t3.ts)", "SUM(t3.u)",
                               "MAX(t3.big)", "AVG(t3.ti)", "COUNT(DISTINCT t3.c)", "MAX(t3.c)", "SUM(t3.flag)",
                               "BIT_AND(t3.big)", "BIT_OR(t3.u)", "BIT_XOR(t3.ti)", exact_spread("STDDEV_SAMP", "t3.ti"),
                               exact_spread("VAR_POP", "t3.ti")])
                    for _ in range(self.r.randint(1, 3))]
            return f"SELECT {group}, {', '.join(aggs)} FROM t3{where} GROUP BY {group}", False
        cols = [self.t3_expr()[0] for _ in range(self.r.randint(1, 4))]
        sql = f"SELECT t3.id, {', '.join(cols)} FROM t3{where}"
        if self.chance(0.4):
            key = self.pick(["t3.f", "t3.ts", "t3.c", "t3.u", "t3.big"])
            sql += f" ORDER BY {key}{self.pick(['', ' DESC'])}, t3.id LIMIT {self.r.randint(1, 10)}"
            return sql, True
        return sql, False

    # ---- t4: case-insensitive text ----
    def ci_word(self, words, space=True):
        """A word of `words` in a random case, sometimes without its accents
        or with a trailing space (which the comparison ignores; not in
        stored names, which a group may show either way)."""
        w = self.pick(words)
        if self.chance(0.2):
            w = w.translate(str.maketrans("èÜë", "eUe"))
        w = self.pick([w, w.upper(), w.lower(), w.capitalize()])
        if space and self.chance(0.1):
            w += " "
        return "'" + w + "'"

    def t4_pred(self, depth=0):
        preds = [
            lambda: f"t4.code {self.pick(['=', '<>', '<', '>=', '<=>'])} {self.ci_word(CI_WORDS)}",
            lambda: f"t4.code IN ({self.ci_word(CI_WORDS)}, {self.ci_word(CI_WORDS)}, {self.ci_word(CI_WORDS)})",
            lambda: f"t4.code BETWEEN {self.ci_word(CI_WORDS)} AND {self.ci_word(CI_WORDS)}",
            lambda: f"t4.code LIKE '{self.pick(['A%', '%E', '%r%', 'c_E%', '_'])}'",
            lambda: f"t4.name {self.pick(['=', '<>', '>', '<'])} {self.ci_word(CI_NAMES)}",
            lambda: f"t4.name IN ({self.ci_word(CI_NAMES)}, {self.ci_word(CI_NAMES)})",
            lambda: f"t4.name LIKE '{self.pick(['a%', '%B', 'Z%', '%o%'])}'",
            lambda: f"t4.name COLLATE utf8mb4_bin = {self.ci_word(CI_NAMES)}",
            lambda: f"t4.note = {self.ci_word(CI_NAMES)}",
            lambda: f"t4.note = t4.name",
            lambda: f"t4.name IS {self.pick(['', 'NOT '])}NULL",
            lambda: f"STRCMP(t4.name, {self.ci_word(CI_NAMES)}) {self.pick(['=', '<', '>'])} 0",
            lambda: f"FIELD(t4.name, {self.ci_word(CI_NAMES)}, {self.ci_word(CI_NAMES)}) > 0",
            lambda: f"t4.code REGEXP '{self.pick(['^a', 'E$', '^[b-d]', 'an'])}'",
            lambda: f"CASE t4.name WHEN {self.ci_word(CI_NAMES)} THEN 1 WHEN {self.ci_word(CI_NAMES)} THEN 2 ELSE 0 END > 0",
            lambda: f"t4.n {self.pick(['<', '>', '='])} {self.r.randint(0, 9)}",
        ]
        if depth < 1:
            # A subquery's values keep their column's collation: a literal
            # takes the column's. (Text of both collations on the two
            # sides is left out: MariaDB 10.11 answers its semi-joins and
            # NOT IN under the `_ci` collation and IN under utf8mb4_bin in
            # one state; tests/sql/cli_script.sql checks those cases.)
            same = {"name": ["o.name", "o.code", "UPPER(o.name)"], "code": ["o.name", "o.code"],
                    "note": ["o.note", "UPPER(o.note)"]}
            outer = lambda: self.pick(["name", "code", "note"])
            sub_col = lambda: self.pick(["o.name", "o.note", "o.code", "UPPER(o.note)"])

            def in_subquery():
                col = outer()
                return (f"t4.{col} {self.pick(['', 'NOT '])}IN (SELECT {self.pick(same[col])} FROM t4 AS o "
                        f"WHERE {self.pick(same[col])} IS NOT NULL)")

            def any_subquery():
                col = outer()
                return f"t4.{col} = ANY (SELECT {self.pick(same[col])} FROM t4 AS o WHERE o.n > 4)"

            def exists():
                col = outer()
                return f"EXISTS (SELECT 1 FROM t4 AS o WHERE {self.pick(same[col])} = t4.{col})"

            preds += [
                in_subquery,
                lambda: f"{self.ci_word(CI_NAMES)} IN (SELECT {sub_col()} FROM t4 AS o)",
                any_subquery,
                exists,
            ]
            preds += [
                lambda: f"({self.t4_pred(1)} AND {self.t4_pred(1)})",
                lambda: f"({self.t4_pred(1)} OR {self.t4_pred(1)})",
                lambda: f"NOT ({self.t4_pred(1)})",
            ]
        return self.pick(preds)()

    def t4_query(self):
        """Queries whose answers do not depend on which of two equal texts
        a system shows: a case-insensitive value is shown where its weight
        is unique (code), folded (UPPER), or ordered with a tie-breaker."""
        where = f" WHERE {self.t4_pred()}" if self.chance(0.8) else ""
        k = self.r.random()
        if k < 0.45 and "COLLATE" in where:
            # MariaDB 10.11 groups (GROUP BY, COUNT(DISTINCT)) t4.name
            # through its index kn and then loses the rows a COLLATE
            # utf8mb4_bin condition on it keeps (0 or no rows; right with
            # IGNORE INDEX (kn)).
            where = ""
        if k < 0.25:
            aggs = [self.pick(["COUNT(*)", "COUNT(DISTINCT t4.name)", "MAX(t4.code)", "MIN(t4.code)",
                               "UPPER(MIN(t4.name))", "UPPER(MAX(t4.name))", "SUM(t4.n)", "MIN(t4.id)"])
                    for _ in range(self.r.randint(1, 3))]
            if self.chance(0.7):
                return f"SELECT UPPER(t4.name), {', '.join(aggs)} FROM t4{where} GROUP BY t4.name", False
            return f"SELECT {', '.join(aggs)} FROM t4{where}", False
        if k < 0.35:
            return f"SELECT DISTINCT UPPER(t4.name) FROM t4{where}", False
        if k < 0.45:
            return f"SELECT COUNT(*) FROM (SELECT DISTINCT t4.name FROM t4{where}) AS d", False
        if k < 0.55:
            # A join on the case-insensitive primary key.
            return (f"SELECT t4.id, o.id FROM t4 JOIN t4 AS o ON o.code = {self.pick(['t4.name', 't4.note', 't4.code'])}"
                    f"{where}"), False
        if k < 0.62:
            # These return one argument as written: of equal ones, the first.
            w = lambda: self.ci_word(self.pick([CI_NAMES, CI_WORDS]))
            col = lambda: self.pick(["t4.name", "t4.code", "t4.note"])
            return (f"SELECT t4.id, NULLIF({col()}, {w()}), GREATEST({col()}, {w()}), "
                    f"LEAST({w()}, {col()}, {w()}) FROM t4{where}"), False
        if k < 0.68:
            # Set operations drop duplicates under the columns' collation; of
            # equal texts the first branch's shows (the key is unique there).
            w = lambda: self.ci_word(CI_WORDS)
            op = self.pick(["UNION", "UNION", "INTERSECT", "EXCEPT"])
            if self.chance(0.3):
                return (f"SELECT COUNT(*) FROM (SELECT t4.name FROM t4{where} UNION SELECT {self.ci_word(CI_NAMES)}) AS d"), False
            return f"SELECT t4.code FROM t4{where} {op} SELECT {w()} {self.pick(['UNION', 'UNION ALL'])} SELECT {w()}", False
        if k < 0.74:
            # REGEXP functions match case-insensitive text regardless of case.
            pat = lambda: "'" + self.pick(["a", "E", "^[b-d]", "an", "R$", "[A-C]"]) + "'"
            col = lambda: self.pick(["t4.name", "t4.code", "t4.note"])
            return (f"SELECT t4.id, REGEXP_INSTR({col()}, {pat()}), REGEXP_REPLACE({col()}, {pat()}, '#'), "
                    f"NULLIF(REGEXP_SUBSTR({col()}, {pat()}), '') FROM t4{where}"), False
        sql = f"SELECT t4.id, t4.code, t4.name, t4.n, t4.note FROM t4{where}"
        if self.chance(0.5):
            # (A number computed from text keeps sorting as a number.)
            key = self.pick(["t4.code", "t4.name", "t4.note", "UPPER(t4.name)", "CHAR_LENGTH(CONCAT(t4.name, t4.code))"])
            sql += f" ORDER BY {key}{self.pick(['', ' DESC'])}, t4.id LIMIT {self.r.randint(1, 10)}"
            return sql, True
        return sql, False

    def t4_values(self, id_):
        name = self.pick(["NULL", self.ci_word(CI_NAMES, space=False)])
        note = self.pick(["NULL", self.ci_word(CI_NAMES, space=False)])
        n = self.pick(["NULL", str(self.r.randint(0, 9))])
        return f"({self.ci_word(CI_WORDS)}, {id_}, {name}, {n}, {note})"

    def t4_write(self):
        k = self.r.random()
        if k < 0.35:
            rows = ", ".join(self.t4_values(self.r.randint(1, 40)) for _ in range(self.r.randint(1, 3)))
            return f"{self.pick(['INSERT IGNORE', 'REPLACE', 'INSERT'])} INTO t4 VALUES {rows}"
        if k < 0.45:
            return (f"INSERT INTO t4 VALUES {self.t4_values(self.r.randint(1, 40))} ON DUPLICATE KEY UPDATE "
                    f"n = {self.r.randint(0, 9)}")
        if k < 0.55:
            # Rows of t4 again, their keys spelled another way (equal under
            # the collation, or not) and their ids moved or not: the
            # statement's rows meet stored ones and each other.
            code = self.pick(["UPPER(o.code)", "LOWER(o.code)", "CONCAT(o.code, 'x')", "o.code"])
            id_ = self.pick(["o.id", f"o.id + {self.r.randint(1, 30)}", f"41 - o.id"])
            verb = self.pick(["INSERT IGNORE", "REPLACE"])
            sql = f"{verb} INTO t4 SELECT {code}, {id_}, o.name, o.n, o.note FROM t4 AS o WHERE o.n {self.pick(['<', '>', '='])} {self.r.randint(0, 9)}"
            if verb == "INSERT IGNORE" and self.chance(0.3):
                sql = f"INSERT INTO t4 SELECT {code}, {id_}, o.name, o.n, o.note FROM t4 AS o WHERE o.id < {self.r.randint(1, 20)} ON DUPLICATE KEY UPDATE n = {self.r.randint(0, 9)}"
            return sql
        if k < 0.8:
            col, value = self.pick([
                ("name", lambda: self.ci_word(CI_NAMES, space=False)),
                ("n", lambda: f"t4.n + {self.r.randint(1, 3)}"),
                ("note", lambda: self.pick(["t4.name", self.ci_word(CI_NAMES, space=False)])),
            ])
            return f"UPDATE t4 SET {col} = {value()} WHERE {self.t4_pred()}"
        return f"DELETE FROM t4 WHERE {self.t4_pred()}"

    def t3_values(self, id_):
        u = self.pick(["NULL", "0", "7", "4294967295", str(self.r.randint(0, 1000))])
        ti = self.pick(["NULL", "-128", "127", "0", str(self.r.randint(-20, 20))])
        f = self.pick(["NULL"] + DOUBLES)
        c = self.pick(["NULL"] + [f"'{w}'" for w in CHARS])
        ts = self.pick(["NULL", f"'{self.t3_datetime()}'"])
        flag = self.pick(["NULL", "TRUE", "FALSE", "0", "1"])
        big = self.pick(["NULL", "0", "9223372036854775808", "18446744073709551615", str(self.r.randint(0, 10**15))])
        return f"({id_}, {u}, {ti}, {f}, {c}, {ts}, {flag}, {big})"

    def t3_write(self):
        k = self.r.random()
        if k < 0.3:
            rows = ", ".join(self.t3_values(self.r.randint(1, 40)) for _ in range(self.r.randint(1, 3)))
            return f"{self.pick(['INSERT IGNORE', 'REPLACE'])} INTO t3 VALUES {rows}"
        if k < 0.7:
            col, value = self.pick([
                ("f", lambda: f"t3.f * {self.pick(['2', '-1', '0.5'])}"),
                ("f", lambda: self.pick(DOUBLES)),
                ("c", lambda: f"'{self.pick(CHARS)}'"),
                ("ts", lambda: f"DATE_ADD(t3.ts, INTERVAL {self.r.randint(-90, 90)} MINUTE)"),
                ("flag", lambda: "NOT t3.flag"),
                ("u", lambda: f"t3.u + {self.r.randint(0, 9)}"),
                ("ti", lambda: f"t3.ti DIV 2"),
                ("big", lambda: f"t3.big DIV {self.pick(['2', '3'])}"),
            ])
            return f"UPDATE t3 SET {col} = {value()} WHERE {self.t3_pred()}"
        return f"DELETE FROM t3 WHERE {self.t3_pred()}"

    # ---- writes ----
    def t1_values(self, id_):
        a = self.pick(["NULL", self.int_lit(), str(self.r.randint(-20, 20))])
        b = self.pick(["NULL", str(self.r.randint(-(10**12), 10**12)), self.int_lit()])
        s = self.pick(["NULL", self.str_lit(), self.str_lit()])
        d = self.pick(["NULL", self.dec_lit(), "%.2f" % (self.r.randint(-99999, 99999) / 100)])
        dt = self.pick(["NULL", self.date_lit(), self.date_lit()])
        return f"({id_}, {a}, {b}, {s}, {d}, {dt})"

    def t2_values(self, id_):
        t1_id = self.pick(["NULL", str(self.r.randint(1, 45))])
        x = str(self.r.randint(-5, 30))
        s = self.pick(["NULL", self.str_lit()])
        return f"({id_}, {t1_id}, {x}, {s})"

    def cross_write(self):
        """Writes that read another table: INSERT ... SELECT (plain, IGNORE,
        REPLACE, ON DUPLICATE KEY UPDATE) and multi-table UPDATE and DELETE."""
        off = self.pick([0, 20, 40, 60])
        k = self.r.random()
        if k < 0.3:
            verb = self.pick(["INSERT", "INSERT IGNORE", "REPLACE"])
            return (f"{verb} INTO t2 (id, t1_id, x, s) SELECT t1.id + {off}, t1.a, COALESCE(t1.b % 100, 7), t1.s "
                    f"FROM t1 WHERE {self.pred(['t1'])}")
        if k < 0.45:
            return (f"INSERT INTO t2 (id, t1_id, x, s) SELECT t1.id + {off}, t1.a, 1, t1.s FROM t1 "
                    f"WHERE {self.pred(['t1'])} ON DUPLICATE KEY UPDATE x = x + 1")
        if k < 0.6:
            return (f"INSERT IGNORE INTO t1 (id, a, s) SELECT t2.id + {off}, t2.x, t2.s FROM t2 "
                    f"WHERE {self.pred(['t2'])}")
        if k < 0.7:
            col = self.pick(["a", "b"])
            value = self.pick([f"t1.{col} + 1", str(self.r.randint(-5, 5)), "NULL", f"t1.{col} * 2"])
            return f"UPDATE t1 JOIN t2 ON t2.t1_id = t1.id SET t1.{col} = {value} WHERE {self.pred(['t1', 't2'])}"
        if k < 0.8:
            # Values from the other table, one joined row per target row (by
            # id), in the comma form or with JOIN; one assignment, since
            # MariaDB gives later ones the old values where MySQL's order is
            # unspecified.
            col = self.pick(["a", "b", "d"])
            value = self.pick([f"t2.x + t1.{col}", "t2.x", f"t2.x * 2 - 1", f"COALESCE(t2.t1_id, t1.{col})",
                               "CHAR_LENGTH(t2.s)"])
            frm = self.pick(["t1, t2 WHERE t2.id = t1.id AND", "t1 JOIN t2 ON t2.id = t1.id WHERE"])
            return f"UPDATE {frm.replace(' WHERE', ' SET t1.' + col + ' = ' + value + ' WHERE', 1)} " \
                f"{self.pred(['t1', 't2'])}"
        # (No subquery reading t2 in the WHERE: MariaDB refuses it with 1093
        # for a multi-table DELETE of t2; latsdb runs it first, as MariaDB
        # does for a single-table one.)
        if self.chance(0.3):
            return f"DELETE t2 FROM t2, t1 WHERE t1.id = t2.t1_id AND {self.pred(['t1', 't2'])}"
        return f"DELETE t2 FROM t2 JOIN t1 ON t1.id = t2.t1_id WHERE {self.pred(['t1', 't2'])}"

    def write(self):
        self.writing = True
        try:
            return self.write_statement()
        finally:
            self.writing = False

    def write_statement(self):
        if self.chance(0.12):
            return self.cross_write()
        if self.chance(0.15):
            return self.t3_write()
        if self.chance(0.12):
            return self.t4_write()
        if self.chance(0.05):
            # By key, arithmetic the data nodes may compute: with DECIMAL,
            # DOUBLE and text operands MySQL's types and rounding decide.
            col = self.pick(["a", "b", "d"])
            value = self.pick(["2.5", "'3'", "'1.5'", "0.5e0", "3", "-1.25"])
            return f"UPDATE t1 SET {col} = {col} {self.pick(['+', '-', '*'])} {value} WHERE id = {self.r.randint(1, 50)}"
        t = self.pick(["t1", "t1", "t2"])
        values = self.t1_values if t == "t1" else self.t2_values
        top = 50 if t == "t1" else 80
        k = self.r.random()
        if k < 0.25:
            rows = ", ".join(values(self.r.randint(1, top)) for _ in range(self.r.randint(1, 3)))
            verb = self.pick(["INSERT", "INSERT IGNORE", "REPLACE"])
            return f"{verb} INTO {t} VALUES {rows}"
        if k < 0.4:
            col = self.pick([c for c in INT_COLS[t] if c != "id"])
            return (
                f"INSERT INTO {t} VALUES {values(self.r.randint(1, top))} ON DUPLICATE KEY UPDATE "
                f"{col} = {self.expr([t], 'int', 1)}"
            )
        if k < 0.8:
            kind = self.pick(["int", "str", "dec", "date"] if t == "t1" else ["int", "str"])
            col = self.pick([c for c in {"int": INT_COLS, "str": STR_COLS, "dec": DEC_COLS, "date": DATE_COLS}[kind][t]
                             if c not in ("id", "x")] or ["s"])
            if col == "s":
                kind = "str"
            sql = f"UPDATE {t} SET {col} = {self.expr([t], kind, 1)}"
            if self.chance(0.3):
                other = self.pick([c for c in INT_COLS[t] if c not in ("id", col)])
                sql += f", {other} = {self.expr([t], 'int', 1)}"
            sql += f" WHERE {self.pred([t])}"
            if self.chance(0.2):
                sql += f" ORDER BY id LIMIT {self.r.randint(0, 4)}"
            return sql
        sql = f"DELETE FROM {t} WHERE {self.pred([t])}"
        if self.chance(0.2):
            sql += f" ORDER BY id DESC LIMIT {self.r.randint(0, 3)}"
        return sql


def norm_value(v):
    if v is None:
        return ("null",)
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, (int, decimal.Decimal)):
        return ("num", decimal.Decimal(v).normalize() if v != 0 else decimal.Decimal(0))
    if isinstance(v, float):
        # 15 significant digits: a double of 1e16 differs in its last bits
        # between two summation orders.
        return ("num", decimal.Decimal(f"{round(v, 9):.15g}").normalize())
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8", "replace")
    if isinstance(v, datetime.timedelta):
        # A TIME as MySQL prints it (Python shows 0:28:00).
        whole = int(v.total_seconds())
        sign, whole = ("-", -whole) if whole < 0 else ("", whole)
        text = f"{sign}{whole // 3600:02}:{whole % 3600 // 60:02}:{whole % 60:02}"
        return ("text", text + (f".{v.microseconds:06}" if v.microseconds else ""))
    if isinstance(v, (datetime.date, datetime.datetime)):
        return ("text", str(v))
    return ("text", str(v))


def norm_rows(rows, ordered):
    out = [tuple(norm_value(v) for v in row) for row in rows]
    return out if ordered else sorted(out, key=repr)


def decimal_scales(rows, ordered):
    """Where two DECIMALs stand in the same place of equal answers, their
    scales (a COALESCE(SUM(price), 0) shows 0.00); None elsewhere, so that
    a value typed as an integer on one side is no difference here."""
    keyed = [(tuple(norm_value(v) for v in row), row) for row in rows]
    if not ordered:
        keyed.sort(key=lambda k: repr(k[0]))
    return [tuple(v.as_tuple().exponent if isinstance(v, decimal.Decimal) else None for v in row) for _, row in keyed]


def same_scales(a, b):
    return all(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb) if x is not None and y is not None)


def loosen(rows):
    """The rows with text that reads as a number made a number: two answers
    equal only this way hold the same values typed differently (MySQL types
    a column of a UNION or a CASE by all its branches, latsdb by the values
    it holds)."""

    def value(v):
        if v[0] == "text":
            try:
                d = decimal.Decimal(v[1])
                return ("num", d.normalize()) if d.is_finite() else v
            except decimal.InvalidOperation:
                return v
        return v

    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)


def run(conn, sql, params=None):
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return ("ok", cur.fetchall() if cur.description else cur.rowcount)
    except pymysql.err.Error as e:
        code = e.args[0] if e.args else 0
        return ("error", code, str(e.args[1] if len(e.args) > 1 else e))


def run_prepared(conn, sql, params):
    """Runs a statement as a server-side prepared statement (COM_STMT_PREPARE
    and EXECUTE, binary rows) with mysql-connector-python."""
    try:
        cur = conn.cursor(prepared=True)
        try:
            cur.execute(sql, params)
            return ("ok", cur.fetchall() if cur.description else cur.rowcount)
        finally:
            cur.close()
    except mysql.connector.Error as e:
        return ("error", e.errno, e.msg)


def connect_prepared(addr, user, password, db):
    host, port = addr.rsplit(":", 1)
    return mysql.connector.connect(
        host=host, port=int(port), user=user, password=password, database=db, autocommit=True, use_pure=True
    )


def connect(addr, user, password, db=None):
    host, port = addr.rsplit(":", 1)
    return pymysql.connect(host=host, port=int(port), user=user, password=password, database=db, autocommit=True)


def table_dump(conn, t):
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {t} ORDER BY id")
        return norm_rows(cur.fetchall(), True)


def show(result):
    if result[0] == "error":
        return f"error {result[1]}: {result[2]}"
    if isinstance(result[1], int):
        return f"{result[1]} rows affected"
    rows = list(result[1])
    text = "\n      ".join(repr(r) for r in rows[:12])
    more = f"\n      ... {len(rows) - 12} more" if len(rows) > 12 else ""
    return f"{len(rows)} rows:\n      {text}{more}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("latsdb")
    ap.add_argument("mariadb")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--user", default="root")
    ap.add_argument("--password", default="")
    ap.add_argument("--mariadb-user", default="root")
    ap.add_argument("--mariadb-password", default="")
    ap.add_argument("--strict", action="store_true", help="fail on statements latsdb refuses and MariaDB runs")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the database diff_SEED behind for a closer look")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    gen = Gen(rng)
    db = f"diff_{args.seed}"
    systems = {
        "latsdb": connect(args.latsdb, args.user, args.password),
        "mariadb": connect(args.mariadb, args.mariadb_user, args.mariadb_password),
    }
    # latsdb's default collation is utf8mb4_bin: MariaDB is told to use it
    # too, for columns and for literals, so string comparisons mean the same
    # (t4 names utf8mb4_general_ci on both).
    with systems["mariadb"].cursor() as cur:
        cur.execute("SET NAMES utf8mb4 COLLATE utf8mb4_bin")
    for conn in systems.values():
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db} COLLATE utf8mb4_bin")
            cur.execute(f"USE {db}")
            for stmt in SCHEMA:
                cur.execute(stmt)
    data = [f"INSERT INTO t1 VALUES {', '.join(gen.t1_values(i) for i in range(1, 41))}"]
    data.append(f"INSERT INTO t2 VALUES {', '.join(gen.t2_values(i) for i in range(1, 61))}")
    data.append(f"INSERT INTO t3 VALUES {', '.join(gen.t3_values(i) for i in range(1, 31))}")
    data += [f"INSERT IGNORE INTO t4 VALUES {gen.t4_values(i)}" for i in range(1, 21)]
    for stmt in data:
        for name, conn in systems.items():
            r = run(conn, stmt)
            if r[0] != "ok":
                print(f"setup failed on {name}: {stmt}\n  {show(r)}")
                return 2

    mismatches, unsupported, typed_differently, checked = [], {}, [], 0

    in_transaction = False
    ended_by_error = 0
    failed_alone = 0

    def compare(sql, ordered):
        if in_transaction:
            sql = f"{sql} /* inside a transaction */"
        if args.verbose:
            print(sql, flush=True)
        checked_pair(sql, run(systems["latsdb"], sql), run(systems["mariadb"], sql), ordered)

    def checked_pair(sql, lat, mdb, ordered):
        nonlocal checked
        checked += 1
        if lat[0] == "error" and mdb[0] == "ok":
            key = lat[2][:70]
            unsupported.setdefault(key, (sql, lat))
            return
        if lat[0] == "error" and mdb[0] == "error":
            return
        if lat[0] == "ok" and mdb[0] == "error":
            mismatches.append((sql, lat, mdb))
            return
        a, b = lat[1], mdb[1]
        if isinstance(a, int) or isinstance(b, int):
            if a != b:
                mismatches.append((sql, lat, mdb))
            return
        if len(a) and len(b) and len(a[0]) != len(b[0]):
            mismatches.append((sql, lat, mdb))
            return
        na, nb = norm_rows(a, ordered), norm_rows(b, ordered)
        if na != nb:
            if loosen(na) == loosen(nb):
                typed_differently.append(sql)
            else:
                mismatches.append((sql, lat, mdb))
        elif not same_scales(decimal_scales(a, ordered), decimal_scales(b, ordered)):
            mismatches.append((f"{sql} /* DECIMAL scales differ */", lat, mdb))

    # (MariaDB is asked the same with the parameters filled in by PyMySQL:
    # mysql-connector-python's prepared statements hang on MariaDB 10.11
    # for some joins.)
    latsdb_prepared = connect_prepared(args.latsdb, args.user, args.password, db)

    def compare_prepared():
        nonlocal checked
        checked += 1
        # Literals become parameters; the rows come back in the binary protocol.
        gen.params = []
        sql, ordered = gen.query()
        # Parameters in the order their placeholders stand in the text (the
        # generator writes a WHERE before the select list).
        values, gen.params = gen.params, None
        params = [values[int(n)] for n in re.findall("\x00([0-9]+)\x00", sql)]
        sql = re.sub("\x00[0-9]+\x00", "?", sql)
        if args.verbose:
            print(f"{sql} /* prepared, parameters {params} */", flush=True)
        lat = run_prepared(latsdb_prepared, sql, params)
        # PyMySQL fills in %s and reads other % signs as formats.
        mdb = run(systems["mariadb"], sql.replace("%", "%%").replace("?", "%s"), params)
        shown = f"{sql} /* prepared, parameters {params} */"
        if lat[0] == "error" and mdb[0] == "ok":
            unsupported.setdefault(lat[2][:70], (shown, lat))
        elif lat[0] != mdb[0]:
            mismatches.append((shown, lat, mdb))
        elif lat[0] == "ok":
            na, nb = norm_rows(lat[1], ordered), norm_rows(mdb[1], ordered)
            if na != nb and loosen(na) != loosen(nb):
                mismatches.append((shown, lat, mdb))

    for i in range(args.queries):
        if i % 4 == 3:
            compare_prepared()
            continue
        sql, ordered = gen.query()
        compare(sql, ordered)
    def check_tables(after):
        for t in TABLES:
            da, dm = table_dump(systems["latsdb"], t), table_dump(systems["mariadb"], t)
            if da == dm:
                continue
            print(f"after {after}, table {t} differs:")
            only_l = [r for r in da if r not in dm]
            only_m = [r for r in dm if r not in da]
            print(f"  only in latsdb:  {only_l[:6]}\n  only in MariaDB: {only_m[:6]}")
            mismatches.append((f"-- table {t} after: {after}", ("ok", da), ("ok", dm)))
            # Bring latsdb back in line so later writes are compared from the same state.
            run(systems["latsdb"], f"DELETE FROM {t}")
            with systems["mariadb"].cursor() as cur:
                cur.execute(f"SELECT * FROM {t} ORDER BY id")
                rows = cur.fetchall()
            for row in rows:
                vals = ", ".join("NULL" if v is None else pymysql.converters.escape_item(v, "utf8mb4") for v in row)
                run(systems["latsdb"], f"INSERT INTO {t} VALUES ({vals})")

    def write_and_look():
        """Returns False when the write failed inside a transaction and
        latsdb ended the whole transaction (as NDB does for errors from the
        cluster), where MariaDB undoes the statement alone: both roll back
        and the difference is counted apart. A statement both refuse with
        the same error while latsdb's transaction stays open (a duplicate
        key, a value out of range) fails alone, and the transaction goes on."""
        nonlocal ended_by_error, failed_alone
        # A quarter of the writes outside transactions run as server-side
        # prepared statements on latsdb (literals as parameters), as
        # sysbench and Connector/J with useServerPrepStmts send them.
        prepared = not in_transaction and rng.random() < 0.25
        if prepared:
            gen.params = []
        sql = gen.write()
        if prepared:
            values, gen.params = gen.params, None
            params = [values[int(n)] for n in re.findall("\x00([0-9]+)\x00", sql)]
            sql = re.sub("\x00[0-9]+\x00", "?", sql)
            shown = f"{sql} /* prepared, parameters {params} */"
            if args.verbose:
                print(shown, flush=True)
            lat = run_prepared(latsdb_prepared, sql, params)
            mdb = run(systems["mariadb"], sql.replace("%", "%%").replace("?", "%s"), params)
            checked_pair(shown, lat, mdb, False)
            check_tables(shown)
            compare(*gen.query())
            return True
        if in_transaction:
            lat = run(systems["latsdb"], sql)
            if lat[0] == "error":
                mdb = run(systems["mariadb"], sql)
                shown = f"{sql} /* inside a transaction */"
                probe = run(systems["latsdb"], "SELECT COUNT(*) FROM t1")
                if mdb[0] == "error" and mdb[1] == lat[1] and probe[0] == "ok":
                    failed_alone += 1
                    checked_pair(shown, lat, mdb, False)
                    check_tables(f"{sql}, which failed alone inside a transaction")
                    compare(*gen.query())
                    return True
                # MariaDB ran it: latsdb refused a statement (reported).
                checked_pair(shown, lat, mdb, False)
                for conn in systems.values():
                    run(conn, "ROLLBACK")
                ended_by_error += 1
                check_tables(f"a failed write ended the transaction ({sql})")
                return False
            mdb = run(systems["mariadb"], sql)
            checked_pair(f"{sql} /* inside a transaction */", lat, mdb, False)
        else:
            compare(sql, False)
        check_tables(sql)
        compare(*gen.query())
        return True

    done = 0
    while done < args.writes:
        if rng.random() < 0.25:
            # A transaction: its reads see its own writes, and a statement
            # that fails inside it fails alone (the transaction goes on).
            compare("BEGIN", False)
            in_transaction = True
            going = True
            # Savepoints (what ORMs send for nested transactions): a
            # ROLLBACK TO undoes the writes since, on both.
            savepoints = []
            for _ in range(rng.randint(1, 5)):
                if rng.random() < 0.25:
                    savepoints.append(f"sp{len(savepoints)}")
                    compare(f"SAVEPOINT {savepoints[-1]}", False)
                done += 1
                going = write_and_look()
                if not going:
                    break
                if savepoints and rng.random() < 0.3:
                    at = rng.randrange(len(savepoints))
                    verb = rng.choice(["ROLLBACK TO SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT"])
                    statement = f"{verb} {savepoints[at]}"
                    compare(statement, False)
                    # Savepoints after it are gone; RELEASE drops it too.
                    del savepoints[at if verb.startswith("RELEASE") else at + 1:]
                    check_tables(statement)
            in_transaction = False
            if not going:
                continue
            end = rng.choice(["COMMIT", "ROLLBACK"])
            compare(end, False)
            check_tables(f"the transaction's {end}")
        else:
            write_and_look()
            done += 1

    for sql, lat, mdb in mismatches:
        print(f"MISMATCH (seed {args.seed}): {sql}\n  latsdb:  {show(lat)}\n  MariaDB: {show(mdb)}")
        if lat[0] == mdb[0] == "ok" and not isinstance(lat[1], int) and not isinstance(mdb[1], int):
            a, b = loosen(norm_rows(lat[1], False)), loosen(norm_rows(mdb[1], False))
            print(f"  only latsdb's:  {[r for r in a if r not in b][:5]}")
            print(f"  only MariaDB's: {[r for r in b if r not in a][:5]}")
    for key, (sql, lat) in sorted(unsupported.items()):
        print(f"unsupported (seed {args.seed}): {sql}\n  latsdb: {show(lat)}")
    for sql in typed_differently[:5]:
        print(f"typed differently (seed {args.seed}): {sql}")
    print(
        f"seed {args.seed}: {checked} statements compared, {len(mismatches)} mismatches, "
        f"{len(unsupported)} kinds of statements latsdb refused, {len(typed_differently)} answers typed differently, "
        f"{failed_alone} writes failed alone inside a transaction, {ended_by_error} transactions ended by a failed write"
    )
    for conn in systems.values():
        with conn.cursor() as cur:
            if not args.keep:
                cur.execute(f"DROP DATABASE IF EXISTS {db}")
    if mismatches or (args.strict and unsupported):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
