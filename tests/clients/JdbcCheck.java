// Client-compatibility check: the PostgreSQL JDBC driver against a running
// Sluice server.
//
// Usage: java -cp postgresql.jar JdbcCheck.java PORT
//
// Exercises what a Java application does through JDBC: connect, DDL,
// DatabaseMetaData (getTables, getColumns, getSchemas, getCatalogs: what
// DBeaver, DataGrip and Metabase call first),
// PreparedStatement INSERTs (single and batched, past the driver's
// prepareThreshold so it switches to named server-side statements and
// binary transfer), a parameterised continuous query with LIMIT, result
// values and ResultSetMetaData types, a SQLException's SQLState, and a
// fetch size inside a transaction (Execute with a row limit,
// PortalSuspended, Execute again).
//
// Every step runs even when an earlier one failed (a step that needs an
// earlier one's data fails too); each failure is printed on stderr as
// `jdbc check FAILED at <step>: <what>`. Exits 1 if any step failed;
// prints `jdbc: ok` when all passed.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.TimeZone;
import java.util.UUID;

public class JdbcCheck {
    /** Seconds a continuous query may run before the driver cancels it. */
    static final int QUERY_TIMEOUT_S = 15;
    /** 5000 nexmark events, 46 in every 50 of them bids. */
    static final long NEXMARK_BIDS = 4600;

    static final class CheckFailed extends RuntimeException {
        CheckFailed(String message) {
            super(message);
        }
    }

    interface Step {
        void run() throws Exception;
    }

    static void expect(boolean condition, String message) {
        if (!condition) {
            throw new CheckFailed(message);
        }
    }

    static void expectEq(Object got, Object want, String what) {
        if (!Objects.equals(got, want)) {
            throw new CheckFailed(what + ": got " + show(got) + ", expected " + show(want));
        }
    }

    static String show(Object o) {
        return o == null ? "null" : o + " (" + o.getClass().getSimpleName() + ")";
    }

    /** One row of a test stream. */
    record Row(long id, String name, double price, Timestamp ts) {}

    static Row row(int i) {
        // Millisecond precision: the unit of Sluice's TIMESTAMP.
        Timestamp ts = Timestamp.valueOf(String.format("2024-01-01 12:00:%02d.250", i));
        return new Row(i, "item-" + i + " ünïcode", i * 1.5, ts);
    }

    static String unique(String prefix) {
        return prefix + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    }

    final String url;
    Connection conn;
    final String stream = unique("jdbc_");
    final String inserted = unique("jdbc_ins_");
    final String bids = unique("jdbc_bids_");
    final String others = unique("jdbc_types_");
    final List<Row> insertedRows = new ArrayList<>();
    final List<String> failures = new ArrayList<>();
    int steps = 0;

    JdbcCheck(String url) {
        this.url = url;
    }

    void step(String name, Step body) {
        steps++;
        try {
            if (conn == null || conn.isClosed()) {
                throw new CheckFailed("no open connection");
            }
            if (!conn.getAutoCommit()) {
                conn.rollback();
                conn.setAutoCommit(true);
            }
        } catch (CheckFailed | SQLException e) {
            fail(name, e);
            return;
        }
        try {
            body.run();
            System.out.println("  ok    " + name);
        } catch (Exception e) {
            fail(name, e);
        }
    }

    void fail(String name, Exception e) {
        String message;
        if (e instanceof CheckFailed) {
            message = e.getMessage();
        } else if (e instanceof SQLException sql) {
            message = "SQLException SQLState=" + sql.getSQLState() + ": " + sql.getMessage();
        } else {
            message = e.toString();
            e.printStackTrace();
        }
        System.out.println("  FAIL  " + name);
        failures.add("jdbc check FAILED at " + name + ": " + message);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: java -cp postgresql.jar JdbcCheck.java PORT");
            System.exit(2);
        }
        System.out.println("PostgreSQL JDBC " + org.postgresql.util.DriverInfo.DRIVER_VERSION
                + ", Java " + System.getProperty("java.version"));
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/sluice?user=sluice&connectTimeout=10";
        JdbcCheck check = new JdbcCheck(url);
        check.runAll();
        for (String failure : check.failures) {
            System.err.println(failure);
        }
        if (!check.failures.isEmpty()) {
            System.err.println("jdbc: " + check.failures.size() + " of " + check.steps + " steps failed");
            System.exit(1);
        }
        System.out.println("jdbc: ok");
    }

    void runAll() {
        TimeZone.setDefault(TimeZone.getTimeZone("UTC"));
        try {
            conn = DriverManager.getConnection(url);
        } catch (SQLException e) {
            fail("connect", e);
            return;
        }
        step("server version", this::serverVersion);
        step("create streams, INSERT literal rows", this::createStreams);
        step("DatabaseMetaData getTables, getColumns, getSchemas", this::metaData);
        step("PreparedStatement INSERT, 7 executions (past prepareThreshold)", this::preparedInsert);
        step("PreparedStatement INSERT batch", this::batchInsert);
        step("read back the prepared INSERTs", this::readBackInserts);
        step("PreparedStatement SELECT with a parameter and LIMIT, 6 executions", this::preparedSelect);
        step("PreparedStatement SELECT with a string parameter", this::stringParam);
        step("PreparedStatement SELECT with a timestamp parameter", this::timestampParam);
        step("setBoolean, setBigDecimal, setNull INSERT and read back", this::otherTypes);
        step("setDate in an INSERT", this::dateInsert);
        step("setDate in a SELECT", this::dateSelect);
        step("SQLException 42P01 for an unknown stream", this::unknownStream);
        step("SQLException 42P01 from a PreparedStatement", this::unknownStreamPrepared);
        step("connection usable after the errors", this::usableAfterErrors);
        step("setAutoCommit(false) + setFetchSize(10) over a bounded query", this::fetchSize);
        step("fetch size: portal closed after 25 rows", this::fetchSizeClosedEarly);
        step("cleanup", this::cleanup);
        try {
            conn.close();
        } catch (SQLException e) {
            fail("close", e);
        }

        // The driver sends setTimestamp values as text with the JVM's UTC
        // offset appended and no type, and reads TIMESTAMP values in the
        // JVM's zone: a TIMESTAMP (without time zone) must come back as set
        // whatever that zone is, as Postgres' timestamp input ignores the
        // offset.
        TimeZone.setDefault(TimeZone.getTimeZone("Asia/Kolkata"));
        try {
            conn = DriverManager.getConnection(url);
        } catch (SQLException e) {
            fail("connect (JVM zone Asia/Kolkata)", e);
            return;
        }
        step("TIMESTAMP round trip with the JVM in Asia/Kolkata", this::timestampRoundTrip);
        try {
            conn.close();
        } catch (SQLException e) {
            fail("close", e);
        }
    }

    // -- steps ----------------------------------------------------------

    void serverVersion() throws SQLException {
        expect(conn.getMetaData().getDatabaseMajorVersion() >= 10,
                "server version " + conn.getMetaData().getDatabaseProductVersion());
    }

    void createStreams() throws SQLException {
        try (Statement st = conn.createStatement()) {
            for (String name : List.of(stream, inserted)) {
                st.execute("CREATE STREAM " + name + " (id BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP, "
                        + "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)");
            }
            st.execute("CREATE STREAM " + bids + " WITH (connector='nexmark', table='bid', 'events.max'=5000)");
            // The query steps read rows inserted without parameters, so they
            // do not depend on the parameter steps.
            StringBuilder values = new StringBuilder();
            for (int i = 1; i <= 8; i++) {
                Row r = row(i);
                values.append(i == 1 ? "" : ", ").append(String.format("(%d, '%s', %s, '%s')",
                        r.id(), r.name(), r.price(), r.ts()));
            }
            int n = st.executeUpdate("INSERT INTO " + stream + " VALUES " + values);
            expectEq(n, 8, "update count of the literal INSERT");
        }
    }

    /**
     * What DBeaver, DataGrip and Metabase call first. Expected rows follow
     * from the CREATE STREAM statements above: `stream` has columns id
     * BIGINT, name VARCHAR, price DOUBLE, ts TIMESTAMP (Postgres int8, text,
     * float8, timestamp), all nullable.
     */
    void metaData() throws SQLException {
        java.sql.DatabaseMetaData md = conn.getMetaData();
        try (ResultSet rs = md.getTables(null, "public", stream, new String[] {"TABLE"})) {
            expect(rs.next(), "getTables found no table " + stream);
            expectEq(rs.getString("TABLE_SCHEM"), "public", "TABLE_SCHEM");
            expectEq(rs.getString("TABLE_NAME"), stream, "TABLE_NAME");
            expectEq(rs.getString("TABLE_TYPE"), "TABLE", "TABLE_TYPE");
            expect(!rs.next(), "getTables found more than " + stream);
        }
        List<String> tables = new ArrayList<>();
        try (ResultSet rs = md.getTables(null, null, "jdbc%", null)) {
            while (rs.next()) {
                tables.add(rs.getString("TABLE_NAME"));
            }
        }
        List<String> created = new ArrayList<>(List.of(stream, inserted, bids));
        java.util.Collections.sort(created);
        // Ordered by type, schema, name: all tables of public.
        expectEq(tables, created, "getTables(null, null, \"jdbc%\", null)");

        String[] names = {"id", "name", "price", "ts"};
        int[] types = {Types.BIGINT, Types.VARCHAR, Types.DOUBLE, Types.TIMESTAMP};
        String[] typeNames = {"int8", "text", "float8", "timestamp"};
        try (ResultSet rs = md.getColumns(null, "public", stream, "%")) {
            for (int c = 0; c < names.length; c++) {
                expect(rs.next(), "getColumns returned " + c + " columns, expected " + names.length);
                String what = "column " + names[c];
                expectEq(rs.getString("TABLE_NAME"), stream, "TABLE_NAME of " + what);
                expectEq(rs.getString("COLUMN_NAME"), names[c], "COLUMN_NAME of " + what);
                expectEq(rs.getInt("DATA_TYPE"), types[c], "DATA_TYPE of " + what);
                expectEq(rs.getString("TYPE_NAME"), typeNames[c], "TYPE_NAME of " + what);
                expectEq(rs.getInt("ORDINAL_POSITION"), c + 1, "ORDINAL_POSITION of " + what);
                expectEq(rs.getInt("NULLABLE"), java.sql.DatabaseMetaData.columnNullable, "NULLABLE of " + what);
                expectEq(rs.getString("IS_NULLABLE"), "YES", "IS_NULLABLE of " + what);
            }
            expect(!rs.next(), "getColumns returned more than " + names.length + " columns");
        }

        List<String> schemas = new ArrayList<>();
        try (ResultSet rs = md.getSchemas()) {
            while (rs.next()) {
                schemas.add(rs.getString("TABLE_SCHEM"));
            }
        }
        expectEq(schemas, List.of("information_schema", "pg_catalog", "public"), "getSchemas()");
        try (ResultSet rs = md.getCatalogs()) {
            expect(rs.next(), "getCatalogs returned nothing");
            expectEq(rs.getString("TABLE_CAT"), "sluice", "getCatalogs()");
        }
    }

    void setRow(PreparedStatement ps, Row r) throws SQLException {
        ps.setLong(1, r.id());
        ps.setString(2, r.name());
        ps.setDouble(3, r.price());
        ps.setTimestamp(4, r.ts());
    }

    void preparedInsert() throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + inserted + " VALUES (?, ?, ?, ?)")) {
            for (int i = 1; i <= 7; i++) {
                setRow(ps, row(i));
                expectEq(ps.executeUpdate(), 1, "update count of INSERT " + i);
                insertedRows.add(row(i));
            }
        }
    }

    void batchInsert() throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + inserted + " VALUES (?, ?, ?, ?)")) {
            for (int i = 8; i <= 10; i++) {
                setRow(ps, row(i));
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            expectEq(counts.length, 3, "batch result count");
            for (int c : counts) {
                expect(c == 1 || c == Statement.SUCCESS_NO_INFO, "batch update count " + c);
            }
            for (int i = 8; i <= 10; i++) {
                insertedRows.add(row(i));
            }
        }
    }

    /** Runs `sql` with the query timeout; a timeout is a CheckFailed. */
    ResultSet query(Statement st, String sql, String what) throws SQLException {
        st.setQueryTimeout(QUERY_TIMEOUT_S);
        try {
            return st instanceof PreparedStatement ps ? ps.executeQuery() : st.executeQuery(sql);
        } catch (SQLException e) {
            if ("57014".equals(e.getSQLState())) {
                throw new CheckFailed(what + " did not finish within " + QUERY_TIMEOUT_S + "s (cancelled)");
            }
            throw e;
        }
    }

    void checkRow(ResultSet rs, Row want, String what) throws SQLException {
        expectEq(rs.getLong(1), want.id(), "id of " + what);
        expectEq(rs.getString(2), want.name(), "name of " + what);
        expectEq(rs.getDouble(3), want.price(), "price of " + what);
        expectEq(rs.getTimestamp(4), want.ts(), "ts of " + what);
        expectEq(rs.getObject(1), want.id(), "getObject(id) of " + what);
        expectEq(rs.getObject(2), want.name(), "getObject(name) of " + what);
        expectEq(rs.getObject(3), want.price(), "getObject(price) of " + what);
        expectEq(rs.getObject(4), want.ts(), "getObject(ts) of " + what);
    }

    void readBackInserts() throws SQLException {
        int n = insertedRows.size();
        expect(n > 0, "no INSERT step succeeded");
        String sql = "SELECT id, name, price, ts FROM " + inserted + " LIMIT " + n;
        try (Statement st = conn.createStatement(); ResultSet rs = query(st, sql, "reading back " + n + " rows")) {
            for (int i = 0; i < n; i++) {
                expect(rs.next(), "only " + i + " rows, expected " + n);
                checkRow(rs, insertedRows.get(i), "row " + i);
            }
            expect(!rs.next(), "more than " + n + " rows");
        }
    }

    void preparedSelect() throws SQLException {
        String sql = "SELECT id, name, price, ts FROM " + stream + " WHERE id > ? LIMIT 4";
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            // The driver switches to a named statement and binary results
            // after prepareThreshold (5) executions: check every round.
            for (int round = 1; round <= 6; round++) {
                String what = "execution " + round;
                ps.setLong(1, 2);
                try (ResultSet rs = query(ps, sql, what)) {
                    ResultSetMetaData md = rs.getMetaData();
                    expectEq(md.getColumnCount(), 4, "column count (" + what + ")");
                    String[] names = {"id", "name", "price", "ts"};
                    int[] types = {Types.BIGINT, Types.VARCHAR, Types.DOUBLE, Types.TIMESTAMP};
                    String[] typeNames = {"BIGINT", "VARCHAR", "DOUBLE", "TIMESTAMP"};
                    for (int c = 1; c <= 4; c++) {
                        expectEq(md.getColumnLabel(c), names[c - 1], "label of column " + c);
                        expectEq(md.getColumnType(c), types[c - 1], "java.sql.Types of column " + names[c - 1]
                                + " (" + md.getColumnTypeName(c) + "; Types." + typeNames[c - 1] + " expected)");
                    }
                    for (int i = 0; i < 4; i++) {
                        expect(rs.next(), "only " + i + " rows (" + what + ")");
                        checkRow(rs, row(3 + i), "row " + i + " (" + what + ")");
                    }
                    expect(!rs.next(), "more than 4 rows (" + what + ")");
                }
            }
        }
    }

    void stringParam() throws SQLException {
        String sql = "SELECT id, ts FROM " + stream + " WHERE name = ? LIMIT 1";
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setString(1, row(5).name());
            try (ResultSet rs = query(ps, sql, "the LIMIT 1 query")) {
                expect(rs.next(), "no row");
                expectEq(rs.getLong(1), 5L, "id");
                expectEq(rs.getTimestamp(2), row(5).ts(), "ts");
                expect(!rs.next(), "more than one row");
            }
        }
    }

    void timestampParam() throws SQLException {
        String sql = "SELECT id FROM " + stream + " WHERE ts >= ? LIMIT 2";
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setTimestamp(1, row(4).ts());
            try (ResultSet rs = query(ps, sql, "the LIMIT 2 query")) {
                List<Long> ids = new ArrayList<>();
                while (rs.next()) {
                    ids.add(rs.getLong(1));
                }
                expectEq(ids, List.of(4L, 5L), "ids");
            }
        }
    }

    void otherTypes() throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE STREAM " + others + " (id BIGINT, d DATE, ok BOOLEAN, amt DECIMAL(10,2), note VARCHAR)");
            // Row 1 for the setDate SELECT, without parameters.
            st.executeUpdate("INSERT INTO " + others + " VALUES (1, '2024-02-03', true, 1.50, 'literal')");
        }
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + others + " VALUES (?, ?, ?, ?, ?)")) {
            ps.setLong(1, 2);
            ps.setNull(2, Types.DATE);
            ps.setBoolean(3, false);
            ps.setBigDecimal(4, new java.math.BigDecimal("12.34"));
            ps.setNull(5, Types.VARCHAR);
            expectEq(ps.executeUpdate(), 1, "update count");
        }
        String sql = "SELECT id, d, ok, amt, note FROM " + others + " WHERE id = ? LIMIT 1";
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setLong(1, 2);
            try (ResultSet rs = query(ps, sql, "reading the row back")) {
                expect(rs.next(), "no row");
                expectEq(rs.getDate(2), null, "d");
                expectEq(rs.getObject(3), false, "ok");
                expectEq(rs.getBigDecimal(4), new java.math.BigDecimal("12.34"), "amt");
                expectEq(rs.getString(5), null, "note");
                expectEq(rs.getMetaData().getColumnType(2), Types.DATE, "java.sql.Types of d");
                expectEq(rs.getMetaData().getColumnType(4), Types.NUMERIC, "java.sql.Types of amt");
            }
        }
    }

    // The driver sends setDate values as text with the JVM's offset
    // appended and no type ('2024-02-03 +00'); Postgres' date input
    // ignores the offset.
    void dateInsert() throws SQLException {
        java.sql.Date date = java.sql.Date.valueOf("2024-02-05");
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + others + " (id, d) VALUES (?, ?)")) {
            ps.setLong(1, 3);
            ps.setDate(2, date);
            expectEq(ps.executeUpdate(), 1, "update count");
        }
        String sql = "SELECT d FROM " + others + " WHERE id = 3 LIMIT 1";
        try (Statement st = conn.createStatement(); ResultSet rs = query(st, sql, "reading the row back")) {
            expect(rs.next(), "no row");
            expectEq(rs.getDate(1), date, "d");
        }
    }

    void dateSelect() throws SQLException {
        String sql = "SELECT id FROM " + others + " WHERE d = ? LIMIT 1";
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            ps.setDate(1, java.sql.Date.valueOf("2024-02-03"));
            try (ResultSet rs = query(ps, sql, "the LIMIT 1 query")) {
                expect(rs.next(), "no row");
                expectEq(rs.getLong(1), 1L, "id");
            }
        }
    }

    void unknownStream() throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.executeQuery("SELECT * FROM jdbc_no_such_stream LIMIT 1").close();
            throw new CheckFailed("no SQLException for an unknown stream");
        } catch (SQLException e) {
            expectEq(e.getSQLState(), "42P01", "SQLState (message: " + e.getMessage() + ")");
        }
    }

    void unknownStreamPrepared() throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("SELECT * FROM jdbc_no_such_stream WHERE id = ? LIMIT 1")) {
            ps.setLong(1, 1);
            ps.executeQuery().close();
            throw new CheckFailed("no SQLException for an unknown stream");
        } catch (SQLException e) {
            expectEq(e.getSQLState(), "42P01", "SQLState (message: " + e.getMessage() + ")");
        }
    }

    void usableAfterErrors() throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT 41 + 1 AS n")) {
            expect(rs.next(), "no row");
            expectEq(rs.getInt(1), 42, "SELECT 41 + 1");
        }
        String sql = "SELECT id FROM " + stream + " LIMIT 1";
        try (Statement st = conn.createStatement(); ResultSet rs = query(st, sql, sql)) {
            expect(rs.next(), "no row from the stream");
            expectEq(rs.getLong(1), 1L, "first id");
        }
    }

    void fetchSize() throws SQLException {
        long started = System.nanoTime();
        conn.setAutoCommit(false);
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT auction, bidder, price FROM " + bids + " WHERE price > ?")) {
            ps.setFetchSize(10);
            ps.setLong(1, 0);
            long n = 0;
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    expect(rs.getLong(1) > 0 && rs.getLong(2) > 0 && rs.getLong(3) > 0,
                            "row " + n + ": " + rs.getLong(1) + ", " + rs.getLong(2) + ", " + rs.getLong(3));
                    n++;
                }
            }
            expectEq(n, NEXMARK_BIDS, "rows read 10 at a time");
        }
        conn.commit();
        conn.setAutoCommit(true);
        expect(System.nanoTime() - started < 60_000_000_000L, "reading took over a minute");
    }

    void fetchSizeClosedEarly() throws SQLException {
        conn.setAutoCommit(false);
        try (Statement st = conn.createStatement()) {
            st.setFetchSize(10);
            try (ResultSet rs = st.executeQuery("SELECT auction FROM " + bids)) {
                for (int i = 0; i < 25; i++) {
                    expect(rs.next(), "only " + i + " rows");
                }
            }
            try (ResultSet rs = st.executeQuery("SELECT 1 AS one")) {
                expect(rs.next() && rs.getInt(1) == 1, "SELECT 1 after closing the portal");
            }
        }
        conn.commit();
        conn.setAutoCommit(true);
    }

    void cleanup() throws SQLException {
        try (Statement st = conn.createStatement()) {
            for (String name : List.of(stream, inserted, bids, others)) {
                st.execute("DROP STREAM IF EXISTS " + name);
            }
        }
    }

    void timestampRoundTrip() throws SQLException {
        String name = unique("jdbc_tz_");
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE STREAM " + name + " (id BIGINT, ts TIMESTAMP)");
        }
        try {
            Timestamp ts = Timestamp.valueOf("2024-01-01 12:00:01.250");
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + name + " VALUES (?, ?)")) {
                ps.setLong(1, 1);
                ps.setTimestamp(2, ts);
                ps.executeUpdate();
            }
            String sql = "SELECT ts, CAST(ts AS VARCHAR) AS t FROM " + name + " LIMIT 1";
            try (Statement st = conn.createStatement(); ResultSet rs = query(st, sql, sql)) {
                expect(rs.next(), "no row");
                String text = rs.getString(2);
                expect(text != null && text.replace('T', ' ').startsWith("2024-01-01 12:00:01.25"),
                        "the driver sent '2024-01-01 12:00:01.25+05:30' and the stream stored " + text
                                + "; a TIMESTAMP column stores 2024-01-01 12:00:01.25 (the offset is ignored)");
                expectEq(rs.getTimestamp(1), ts, "getTimestamp");
            }
        } finally {
            try (Statement st = conn.createStatement()) {
                st.execute("DROP STREAM IF EXISTS " + name);
            }
        }
    }
}
