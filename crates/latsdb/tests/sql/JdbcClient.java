// MySQL Connector/J (JDBC) against latsdb's SQL node, run by tests/sql_jdbc.rs
// in Java's single-file source mode:
//
//   java -cp target/jdbc/mysql-connector-j-<version>.jar \
//       crates/latsdb/tests/sql/JdbcClient.java HOST PORT [URL-OPTION...]
//
// It runs the same checks twice: with the driver's default client-side
// prepared statements (parameters inlined into COM_QUERY text), and with
// useServerPrepStmts=true (COM_STMT_PREPARE/EXECUTE, binary protocol). Extra
// arguments such as profileSQL=true are appended to the JDBC URL of both.
// It stops at the first mismatch with a message naming the mode and the step
// and exits 1; on success it prints one line per mode. With --keep-going
// (before HOST) it reports every mismatch and still exits 1 if there was one;
// an SQLException ends that mode all the same.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLIntegrityConstraintViolationException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

public class JdbcClient {
    /** A value read back differs from the one written, or the driver misbehaved. */
    static final class Mismatch extends RuntimeException {
        Mismatch(String message) {
            super(message);
        }
    }

    static String step = "start";
    static String mode = "";
    static int checks;
    // --keep-going: report every mismatch and go on (an SQLException still
    // ends the mode); the exit status is 1 all the same.
    static boolean keepGoing;
    static int failures;

    static void fail(String what) {
        if (!keepGoing) throw new Mismatch(what);
        failures++;
        System.err.println("MISMATCH [" + mode + "] at " + step + ": " + what);
    }

    static void check(boolean ok, String what) {
        checks++;
        if (!ok) fail(what);
    }

    static void eq(Object want, Object got, String what) {
        checks++;
        boolean same = want instanceof byte[] && got instanceof byte[]
                ? Arrays.equals((byte[]) want, (byte[]) got)
                : Objects.equals(want, got);
        if (!same) fail(what + ": expected " + show(want) + ", got " + show(got));
    }

    static String show(Object v) {
        if (v == null) return "NULL";
        if (v instanceof byte[]) return "bytes " + Arrays.toString((byte[]) v);
        if (v instanceof String) return "\"" + v + "\" (" + ((String) v).length() + " chars)";
        return v + " (" + v.getClass().getSimpleName() + ")";
    }

    // The rows written and read back. Row 1 is inserted alone (its id comes
    // from getGeneratedKeys), rows 2..4 in one batch, row 5 holds NULLs.
    static final long BIG1 = 9_007_199_254_740_993L; // not exact as a double
    static final String NAME1 = "Zoë 😀 日本";
    static final String CODE1 = "ab";
    static final BigDecimal PRICE1 = new BigDecimal("12345678.90");
    static final double RATIO1 = 0.1 + 0.2; // 0.30000000000000004
    static final Date DAY1 = Date.valueOf("2024-02-29");
    static final Timestamp AT1 = Timestamp.valueOf("2024-02-29 13:45:30");
    static final String NOTE1 = "line1\nline2\t'single' \"double\" back\\slash %_ ; -- not a comment /* nor this */";
    static final byte[] DATA1 = {0, 1, 0x27, 0x5c, 0x22, (byte) 0x80, (byte) 0xff, 0x1a, 0x0a, 0x0d, 0x25};

    static Connection connect(String base, String db, String options) throws SQLException {
        return DriverManager.getConnection(base + db + "?" + options);
    }

    public static void main(String[] args) throws Exception {
        List<String> rest = new ArrayList<>(Arrays.asList(args));
        keepGoing = rest.remove("--keep-going");
        if (rest.size() < 2) {
            System.err.println(
                    "usage: java -cp mysql-connector-j.jar JdbcClient.java [--keep-going] HOST PORT [URL-OPTION...]");
            System.exit(2);
        }
        String base = "jdbc:mysql://" + rest.get(0) + ":" + rest.get(1) + "/";
        StringBuilder extra = new StringBuilder();
        for (int i = 2; i < rest.size(); i++) extra.append('&').append(rest.get(i));
        String common = "user=root&password=&sslMode=DISABLED&allowPublicKeyRetrieval=true"
                + "&connectTimeout=10000&socketTimeout=60000";
        String[][] modes = {
            {"client-side prepared statements", "text", "useServerPrepStmts=false"},
            // Without emulateUnsupportedPstmts=false the driver would quietly
            // fall back to client-side statements when a prepare fails.
            {"server-side prepared statements (binary protocol)", "binary",
                "useServerPrepStmts=true&emulateUnsupportedPstmts=false"},
        };
        String pid = Long.toString(ProcessHandle.current().pid());
        boolean failed = false;
        for (String[] m : modes) {
            mode = m[0];
            checks = 0;
            failures = 0;
            step = "start";
            try {
                run(base, common + "&" + m[2] + extra, "jdbc_" + m[1] + "_" + pid, m[1].equals("binary"));
            } catch (Mismatch e) {
                System.err.println("FAIL [" + mode + "] at " + step + ": " + e.getMessage());
                System.exit(1);
            } catch (SQLException e) {
                System.err.println("FAIL [" + mode + "] at " + step + ": SQLException error code "
                        + e.getErrorCode() + ", SQLSTATE " + e.getSQLState() + ": " + e.getMessage());
                e.printStackTrace();
                if (!keepGoing) System.exit(1);
                failed = true;
                continue;
            } catch (Exception e) {
                System.err.println("FAIL [" + mode + "] at " + step + ": " + e);
                e.printStackTrace();
                if (!keepGoing) System.exit(1);
                failed = true;
                continue;
            }
            if (failures > 0) {
                System.err.println("FAIL [" + mode + "]: " + failures + " of " + checks + " checks failed");
                failed = true;
            } else {
                System.out.println("ok: " + mode + ": " + checks + " checks passed");
            }
        }
        if (failed) System.exit(1);
    }

    static void run(String base, String options, String db, boolean serverSide) throws SQLException {
        step = "connect without a database";
        try (Connection admin = connect(base, "", options)) {
            check(admin.isValid(5), "isValid");
            try (Statement s = admin.createStatement(); ResultSet rs = s.executeQuery("SELECT 1 + 1")) {
                check(rs.next(), "SELECT 1 + 1 returned no row");
                eq(2, rs.getInt(1), "SELECT 1 + 1");
            }
            step = "CREATE DATABASE " + db;
            try (Statement s = admin.createStatement()) {
                s.execute("CREATE DATABASE " + db + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin");
            }
            step = "setCatalog (USE " + db + ")";
            admin.setCatalog(db);
            eq(db, admin.getCatalog(), "getCatalog after setCatalog");

            step = "connect to database " + db;
            try (Connection c = connect(base, db, options)) {
                eq(db, c.getCatalog(), "getCatalog of a connection opened with a database");
                checkTable(c, admin, db, serverSide);
            } catch (SQLException | RuntimeException e) {
                // Leave no database behind on a server that lives on.
                try (Statement s = admin.createStatement()) {
                    s.execute("DROP DATABASE IF EXISTS " + db);
                } catch (SQLException ignored) {
                    // the failure that matters is e
                }
                throw e;
            }

            step = "DROP DATABASE " + db;
            try (Statement s = admin.createStatement()) {
                s.execute("DROP DATABASE " + db);
            }
            step = "the database is gone";
            try (Statement s = admin.createStatement();
                    ResultSet rs = s.executeQuery("SHOW DATABASES LIKE '" + db + "'")) {
                check(!rs.next(), "SHOW DATABASES still lists " + db + " after DROP DATABASE");
            }
        }
    }

    static PreparedStatement prepare(Connection c, String sql, boolean serverSide) throws SQLException {
        return prepare(c, sql, serverSide, Statement.NO_GENERATED_KEYS);
    }

    static PreparedStatement prepare(Connection c, String sql, boolean serverSide, int keys) throws SQLException {
        PreparedStatement ps = c.prepareStatement(sql, keys);
        // Make sure the mode really is what it says.
        String kind = ps.getClass().getSimpleName();
        check(serverSide == kind.contains("Server"), "statement class " + kind + " for " + sql);
        return ps;
    }

    static void checkTable(Connection c, Connection other, String db, boolean serverSide) throws SQLException {
        step = "CREATE TABLE";
        try (Statement s = c.createStatement()) {
            s.execute("CREATE TABLE items ("
                    + " id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                    + " big BIGINT,"
                    + " name VARCHAR(64) NOT NULL,"
                    + " code CHAR(4),"
                    + " price DECIMAL(10,2),"
                    + " ratio DOUBLE,"
                    + " day DATE,"
                    + " at DATETIME,"
                    + " flag BOOLEAN,"
                    + " note TEXT,"
                    + " data VARBINARY(32))");
        }

        String insert = "INSERT INTO items (big, name, code, price, ratio, day, at, flag, note, data)"
                + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        step = "single insert with getGeneratedKeys";
        try (PreparedStatement ps = prepare(c, insert, serverSide, Statement.RETURN_GENERATED_KEYS)) {
            ps.setLong(1, BIG1);
            ps.setString(2, NAME1);
            ps.setString(3, CODE1);
            ps.setBigDecimal(4, PRICE1);
            ps.setDouble(5, RATIO1);
            ps.setDate(6, DAY1);
            ps.setTimestamp(7, AT1);
            ps.setBoolean(8, true);
            ps.setString(9, NOTE1);
            ps.setBytes(10, DATA1);
            eq(1, ps.executeUpdate(), "executeUpdate count of one INSERT");
            try (ResultSet keys = ps.getGeneratedKeys()) {
                check(keys.next(), "getGeneratedKeys returned no key");
                eq(1L, keys.getLong(1), "generated key of the first row");
                check(!keys.next(), "getGeneratedKeys returned more than one key");
            }

            step = "batch insert (addBatch/executeBatch) with getGeneratedKeys";
            for (int i = 2; i <= 4; i++) {
                ps.setLong(1, i == 3 ? Long.MIN_VALUE : i * 1_000_000_000_000L);
                ps.setString(2, "row " + i);
                ps.setString(3, "c" + i);
                ps.setBigDecimal(4, new BigDecimal(i == 4 ? "-0.05" : i + ".5"));
                ps.setDouble(5, i == 3 ? -2.5e-10 : i * 1.25);
                ps.setDate(6, Date.valueOf("2023-12-2" + i));
                ps.setTimestamp(7, Timestamp.valueOf("1999-12-31 23:59:5" + i));
                ps.setBoolean(8, i % 2 == 0);
                ps.setString(9, "note " + i);
                ps.setBytes(10, new byte[] {(byte) i, (byte) -i});
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            eq("[1, 1, 1]", Arrays.toString(counts), "executeBatch update counts");
            List<Long> keys = new ArrayList<>();
            try (ResultSet rs = ps.getGeneratedKeys()) {
                while (rs.next()) keys.add(rs.getLong(1));
            }
            eq("[2, 3, 4]", keys.toString(), "generated keys of the batch");
        }

        step = "insert with setNull";
        try (PreparedStatement ps = prepare(c, insert, serverSide)) {
            ps.setNull(1, Types.BIGINT);
            ps.setString(2, "nulls");
            ps.setNull(3, Types.CHAR);
            ps.setNull(4, Types.DECIMAL);
            ps.setNull(5, Types.DOUBLE);
            ps.setNull(6, Types.DATE);
            ps.setNull(7, Types.TIMESTAMP);
            ps.setNull(8, Types.BOOLEAN);
            ps.setNull(9, Types.LONGVARCHAR);
            ps.setNull(10, Types.VARBINARY);
            eq(1, ps.executeUpdate(), "executeUpdate count of the INSERT of NULLs");
        }

        step = "one statement executed with changing parameter types";
        try (PreparedStatement ps = prepare(c, "INSERT INTO items (id, name, big) VALUES (?, ?, ?)", serverSide)) {
            ps.setInt(1, 20);
            ps.setString(2, "rebind");
            ps.setNull(3, Types.BIGINT);
            eq(1, ps.executeUpdate(), "INSERT with a NULL parameter");
            ps.setLong(1, 21L);
            ps.setString(2, "rebind");
            ps.setLong(3, -1L);
            eq(1, ps.executeUpdate(), "INSERT with the NULL parameter now a BIGINT");
            ps.setString(1, "22");
            ps.setString(2, "rebind");
            ps.setString(3, "42");
            eq(1, ps.executeUpdate(), "INSERT with every parameter a string");
        }
        try (PreparedStatement ps = prepare(c, "SELECT id, big FROM items WHERE name = ? ORDER BY id", serverSide)) {
            ps.setString(1, "rebind");
            try (ResultSet rs = ps.executeQuery()) {
                StringBuilder got = new StringBuilder();
                while (rs.next()) got.append(rs.getInt(1)).append('=').append(rs.getString(2)).append(' ');
                eq("20=null 21=-1 22=42 ", got.toString(), "rows written with changing parameter types");
            }
        }
        try (PreparedStatement ps = prepare(c, "DELETE FROM items WHERE id >= ?", serverSide)) {
            ps.setInt(1, 20);
            eq(3, ps.executeUpdate(), "DELETE of the rows 20..22");
        }

        step = "SELECT by parameter, row 1";
        String select = "SELECT id, big, name, code, price, ratio, day, at, flag, note, data FROM items WHERE id = ?";
        try (PreparedStatement ps = prepare(c, select, serverSide)) {
            ps.setInt(1, 1);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "no row with id 1");
                eq(1, rs.getInt("id"), "getInt(id)");
                eq(BIG1, rs.getLong("big"), "getLong(big)");
                eq(NAME1, rs.getString("name"), "getString(name)");
                eq(CODE1, rs.getString("code"), "getString(code) of CHAR(4)");
                eq(PRICE1, rs.getBigDecimal("price"), "getBigDecimal(price)");
                eq(RATIO1, rs.getDouble("ratio"), "getDouble(ratio)");
                eq(DAY1, rs.getDate("day"), "getDate(day)");
                eq(LocalDate.of(2024, 2, 29), rs.getObject("day", LocalDate.class), "getObject(day, LocalDate)");
                eq(AT1, rs.getTimestamp("at"), "getTimestamp(at)");
                eq(LocalDateTime.of(2024, 2, 29, 13, 45, 30), rs.getObject("at", LocalDateTime.class),
                        "getObject(at, LocalDateTime)");
                eq(true, rs.getBoolean("flag"), "getBoolean(flag)");
                eq(NOTE1, rs.getString("note"), "getString(note)");
                eq(DATA1, rs.getBytes("data"), "getBytes(data)");
                check(!rs.wasNull(), "wasNull after a non-NULL value");
                check(!rs.next(), "more than one row with id 1");
            }

            step = "SELECT by parameter, batch rows";
            for (int i = 2; i <= 4; i++) {
                ps.setInt(1, i);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "no row with id " + i);
                    eq(i == 3 ? Long.MIN_VALUE : i * 1_000_000_000_000L, rs.getLong("big"), "getLong(big) of row " + i);
                    eq("row " + i, rs.getString("name"), "getString(name) of row " + i);
                    eq("c" + i, rs.getString("code"), "getString(code) of row " + i);
                    eq(new BigDecimal(i == 4 ? "-0.05" : i + ".50"), rs.getBigDecimal("price"),
                            "getBigDecimal(price) of row " + i);
                    eq(i == 3 ? -2.5e-10 : i * 1.25, rs.getDouble("ratio"), "getDouble(ratio) of row " + i);
                    eq(Date.valueOf("2023-12-2" + i), rs.getDate("day"), "getDate(day) of row " + i);
                    eq(Timestamp.valueOf("1999-12-31 23:59:5" + i), rs.getTimestamp("at"),
                            "getTimestamp(at) of row " + i);
                    eq(i % 2 == 0, rs.getBoolean("flag"), "getBoolean(flag) of row " + i);
                    eq("note " + i, rs.getString("note"), "getString(note) of row " + i);
                    eq(new byte[] {(byte) i, (byte) -i}, rs.getBytes("data"), "getBytes(data) of row " + i);
                }
            }

            step = "SELECT by parameter, the row of NULLs";
            ps.setInt(1, 5);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "no row with id 5");
                eq("nulls", rs.getString("name"), "getString(name) of row 5");
                check(!rs.wasNull(), "wasNull after a non-NULL name");
                eq(0L, rs.getLong("big"), "getLong of NULL");
                check(rs.wasNull(), "wasNull after getLong of NULL");
                eq(null, rs.getString("code"), "getString of NULL");
                check(rs.wasNull(), "wasNull after getString of NULL");
                eq(null, rs.getBigDecimal("price"), "getBigDecimal of NULL");
                eq(0.0, rs.getDouble("ratio"), "getDouble of NULL");
                check(rs.wasNull(), "wasNull after getDouble of NULL");
                eq(null, rs.getDate("day"), "getDate of NULL");
                eq(null, rs.getTimestamp("at"), "getTimestamp of NULL");
                eq(false, rs.getBoolean("flag"), "getBoolean of NULL");
                check(rs.wasNull(), "wasNull after getBoolean of NULL");
                eq(null, rs.getString("note"), "getString(note) of NULL");
                eq(null, rs.getBytes("data"), "getBytes of NULL");
                check(rs.wasNull(), "wasNull after getBytes of NULL");
            }
        }

        step = "SELECT with parameters of several types";
        try (PreparedStatement ps = prepare(c,
                "SELECT id FROM items WHERE name = ? AND big = ? AND price = ? AND day = ? AND at = ? AND flag = ?"
                        + " AND data = ?",
                serverSide)) {
            ps.setString(1, NAME1);
            ps.setLong(2, BIG1);
            ps.setBigDecimal(3, PRICE1);
            ps.setDate(4, DAY1);
            ps.setTimestamp(5, AT1);
            ps.setBoolean(6, true);
            ps.setBytes(7, DATA1);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "no row matched the parameters of row 1");
                eq(1, rs.getInt(1), "id matched by parameters");
                check(!rs.next(), "more than one row matched the parameters of row 1");
            }
        }
        try (PreparedStatement ps = prepare(c,
                "SELECT COUNT(*), SUM(price), MAX(big) FROM items WHERE id BETWEEN ? AND ? AND code IS NOT NULL",
                serverSide)) {
            ps.setInt(1, 2);
            ps.setInt(2, 5);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "the aggregate returned no row");
                eq(3L, rs.getLong(1), "COUNT(*) of rows 2..5 with a code");
                eq(new BigDecimal("5.95"), rs.getBigDecimal(2), "SUM(price) of rows 2..4");
                eq(4_000_000_000_000L, rs.getLong(3), "MAX(big) of rows 2..4");
            }
        }

        step = "ResultSetMetaData";
        try (PreparedStatement ps = prepare(c, select, serverSide)) {
            ps.setInt(1, 1);
            try (ResultSet rs = ps.executeQuery()) {
                ResultSetMetaData md = rs.getMetaData();
                eq(11, md.getColumnCount(), "column count");
                String[] names = {"id", "big", "name", "code", "price", "ratio", "day", "at", "flag", "note", "data"};
                int[] types = {Types.INTEGER, Types.BIGINT, Types.VARCHAR, Types.CHAR, Types.DECIMAL, Types.DOUBLE,
                    Types.DATE, Types.TIMESTAMP, Types.BIT, Types.LONGVARCHAR, Types.VARBINARY};
                String[] typeNames = {"INT", "BIGINT", "VARCHAR", "CHAR", "DECIMAL", "DOUBLE", "DATE", "DATETIME",
                    "BIT", "TEXT", "VARBINARY"};
                for (int i = 0; i < names.length; i++) {
                    eq(names[i], md.getColumnName(i + 1), "getColumnName(" + (i + 1) + ")");
                    eq(names[i], md.getColumnLabel(i + 1), "getColumnLabel(" + (i + 1) + ")");
                    eq(typeNames[i], md.getColumnTypeName(i + 1), "getColumnTypeName of " + names[i]);
                    eq(types[i], md.getColumnType(i + 1), "getColumnType (java.sql.Types) of " + names[i]);
                    eq("items", md.getTableName(i + 1), "getTableName of " + names[i]);
                }
                eq(db, md.getCatalogName(1), "getCatalogName");
                eq(true, md.isAutoIncrement(1), "isAutoIncrement(id)");
                eq(false, md.isAutoIncrement(2), "isAutoIncrement(big)");
                eq(ResultSetMetaData.columnNoNulls, md.isNullable(3), "isNullable(name)");
                eq(ResultSetMetaData.columnNullable, md.isNullable(2), "isNullable(big)");
                eq(10, md.getPrecision(5), "getPrecision(price)");
                eq(2, md.getScale(5), "getScale(price)");
                eq(64, md.getPrecision(3), "getPrecision(name)");
                eq("java.lang.Integer", md.getColumnClassName(1), "getColumnClassName(id)");
                eq("java.math.BigDecimal", md.getColumnClassName(5), "getColumnClassName(price)");
                eq("[B", md.getColumnClassName(11), "getColumnClassName(data)");
            }
        }

        step = "UPDATE/DELETE row counts";
        try (PreparedStatement ps = prepare(c, "UPDATE items SET ratio = ratio * 2 WHERE id IN (?, ?)", serverSide)) {
            ps.setInt(1, 2);
            ps.setInt(2, 4);
            eq(2, ps.executeUpdate(), "UPDATE of two rows");
            ps.setInt(1, 100);
            ps.setInt(2, 101);
            eq(0, ps.executeUpdate(), "UPDATE of no row");
        }
        // Connector/J asks for found rows (CLIENT_FOUND_ROWS): a matched row
        // counts even when the UPDATE leaves it unchanged.
        try (PreparedStatement ps = prepare(c, "UPDATE items SET name = ? WHERE id = ?", serverSide)) {
            ps.setString(1, "row 3");
            ps.setInt(2, 3);
            eq(1, ps.executeUpdate(), "UPDATE that matches one row and changes nothing (CLIENT_FOUND_ROWS)");
        }
        try (PreparedStatement ps = prepare(c, "SELECT ratio FROM items WHERE id = ?", serverSide)) {
            ps.setInt(1, 4);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "row 4 is gone after the UPDATE");
                eq(10.0, rs.getDouble(1), "ratio of row 4 after ratio * 2");
            }
        }
        try (PreparedStatement ps = prepare(c, "DELETE FROM items WHERE id = ?", serverSide)) {
            ps.setInt(1, 4);
            eq(1, ps.executeUpdate(), "DELETE of one row");
            eq(0, ps.executeUpdate(), "DELETE of a row already deleted");
        }
        try (Statement s = c.createStatement()) {
            eq(1, s.executeUpdate("UPDATE items SET flag = NOT flag WHERE id = 2"), "Statement.executeUpdate");
        }

        step = "a committed transaction";
        String count = "SELECT COUNT(*) FROM items";
        c.setAutoCommit(false);
        eq(false, c.getAutoCommit(), "getAutoCommit after setAutoCommit(false)");
        try (PreparedStatement ins = prepare(c, "INSERT INTO items (id, name) VALUES (?, ?)", serverSide)) {
            ins.setInt(1, 10);
            ins.setString(2, "committed");
            eq(1, ins.executeUpdate(), "INSERT in a transaction");
            eq("committed", nameOf(c, 10, serverSide), "the transaction reads its own INSERT by key");
            eq(5L, countRows(c, count), "COUNT(*) (a scan) inside the transaction after its INSERT");
            eq(4L, countRows(other, count), "rows seen by another connection before COMMIT");
            c.commit();
            eq(5L, countRows(other, count), "rows seen by another connection after COMMIT");

            step = "a rolled back transaction";
            ins.setInt(1, 11);
            ins.setString(2, "rolled back");
            eq(1, ins.executeUpdate(), "INSERT in a transaction");
            try (PreparedStatement del = prepare(c, "DELETE FROM items WHERE id = ?", serverSide)) {
                del.setInt(1, 1);
                eq(1, del.executeUpdate(), "DELETE in a transaction");
            }
            eq(null, nameOf(c, 1, serverSide), "the transaction reads its own DELETE by key");
            eq("rolled back", nameOf(c, 11, serverSide), "the transaction reads its own INSERT by key");
            eq(5L, countRows(c, count), "COUNT(*) (a scan) inside the transaction after an INSERT and a DELETE");
            c.rollback();
            c.setAutoCommit(true);
            eq(true, c.getAutoCommit(), "getAutoCommit after setAutoCommit(true)");
            eq(5L, countRows(c, count), "rows after ROLLBACK");
            try (PreparedStatement ps = prepare(c, "SELECT name FROM items WHERE id IN (?, ?) ORDER BY id", serverSide)) {
                ps.setInt(1, 1);
                ps.setInt(2, 11);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "the DELETE of row 1 was not rolled back");
                    eq(NAME1, rs.getString(1), "row 1 after ROLLBACK");
                    check(!rs.next(), "the INSERT of row 11 was not rolled back");
                }
            }
        }

        step = "duplicate key";
        try (PreparedStatement ps = prepare(c, "INSERT INTO items (id, name) VALUES (?, ?)", serverSide)) {
            ps.setInt(1, 1);
            ps.setString(2, "duplicate");
            try {
                ps.executeUpdate();
                throw new Mismatch("an INSERT of an existing primary key succeeded");
            } catch (SQLIntegrityConstraintViolationException e) {
                eq(1062, e.getErrorCode(), "error code of a duplicate key");
                eq("23000", e.getSQLState(), "SQLSTATE of a duplicate key");
            }
        }
        step = "the connection works after the duplicate key";
        check(c.isValid(5), "isValid after the duplicate key");
        eq(5L, countRows(c, count), "rows after the failed INSERT");
        try (PreparedStatement ps = prepare(c, "SELECT name FROM items WHERE id = ?", serverSide)) {
            ps.setInt(1, 1);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "row 1 is gone after the duplicate key");
                eq(NAME1, rs.getString(1), "row 1 after the duplicate key");
            }
        }

        step = "DatabaseMetaData.getTables";
        DatabaseMetaData meta = c.getMetaData();
        List<String> tables = new ArrayList<>();
        try (ResultSet rs = meta.getTables(db, null, "%", new String[] {"TABLE"})) {
            while (rs.next()) {
                eq(db, rs.getString("TABLE_CAT"), "TABLE_CAT");
                eq("TABLE", rs.getString("TABLE_TYPE"), "TABLE_TYPE");
                tables.add(rs.getString("TABLE_NAME"));
            }
        }
        eq("[items]", tables.toString(), "tables of " + db);

        step = "DatabaseMetaData.getPrimaryKeys";
        try (ResultSet rs = meta.getPrimaryKeys(db, null, "items")) {
            check(rs.next(), "getPrimaryKeys returned no row");
            eq("id", rs.getString("COLUMN_NAME"), "primary key column");
            eq((short) 1, rs.getShort("KEY_SEQ"), "KEY_SEQ");
            check(!rs.next(), "getPrimaryKeys returned more than one column");
        }

        step = "DatabaseMetaData.getColumns";
        List<String> columns = new ArrayList<>();
        try (ResultSet rs = meta.getColumns(db, null, "items", "%")) {
            while (rs.next()) {
                String name = rs.getString("COLUMN_NAME");
                columns.add(name + ":" + rs.getInt("DATA_TYPE") + ":" + rs.getString("TYPE_NAME"));
                eq(columns.size(), rs.getInt("ORDINAL_POSITION"), "ORDINAL_POSITION of " + name);
                eq(name.equals("id") || name.equals("name") ? DatabaseMetaData.columnNoNulls
                        : DatabaseMetaData.columnNullable, rs.getInt("NULLABLE"), "NULLABLE of " + name);
                eq(name.equals("id") ? "YES" : "NO", rs.getString("IS_AUTOINCREMENT"), "IS_AUTOINCREMENT of " + name);
                if (name.equals("price")) {
                    eq(10, rs.getInt("COLUMN_SIZE"), "COLUMN_SIZE of price");
                    eq(2, rs.getInt("DECIMAL_DIGITS"), "DECIMAL_DIGITS of price");
                }
                if (name.equals("name")) eq(64, rs.getInt("COLUMN_SIZE"), "COLUMN_SIZE of name");
            }
        }
        eq("[id:4:INT, big:-5:BIGINT, name:12:VARCHAR, code:1:CHAR, price:3:DECIMAL, ratio:8:DOUBLE, day:91:DATE,"
                + " at:93:DATETIME, flag:-7:BIT, note:-1:TEXT, data:-3:VARBINARY]",
                columns.toString(), "getColumns: name:java.sql.Types:TYPE_NAME of each column");
    }

    /** The name of row `id`, or null when there is no such row. */
    static String nameOf(Connection c, int id, boolean serverSide) throws SQLException {
        try (PreparedStatement ps = prepare(c, "SELECT name FROM items WHERE id = ?", serverSide)) {
            ps.setInt(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        }
    }

    static long countRows(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            check(rs.next(), sql + " returned no row");
            return rs.getLong(1);
        }
    }
}
