// pgJDBC logs in to Sluice with SCRAM-SHA-256 (issue 26): the superuser's
// right password runs a query, a wrong one is 28P01, an unknown role 28000;
// a role created over JDBC logs in with its own password and is refused
// (42501) what it was not granted, then reads after a GRANT.
// Usage: java -cp postgresql.jar JdbcScramCheck.java <port> <superuser password>
import java.sql.*;
import java.util.Properties;

public class JdbcScramCheck {
    static int failures = 0;

    static Connection connect(int port, String user, String password) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("password", password);
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", "15");
        p.setProperty("sslmode", "disable");
        return DriverManager.getConnection("jdbc:postgresql://127.0.0.1:" + port + "/sluice", p);
    }

    static void check(String what, boolean ok, String detail) {
        if (!ok) {
            failures++;
            System.out.println("FAIL " + what + ": " + detail);
        }
    }

    static String refusal(int port, String user, String password) {
        try (Connection c = connect(port, user, password)) {
            return "accepted";
        } catch (SQLException e) {
            return e.getSQLState();
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String superPassword = args[1];
        try (Connection c = connect(port, "sluice", superPassword); Statement s = c.createStatement()) {
            ResultSet r = s.executeQuery("SELECT 20 + 22");
            check("superuser query", r.next() && r.getLong(1) == 42, "SELECT 20 + 22");
            s.execute("CREATE USER jdbc_u WITH PASSWORD 'jdbc-user-pw'");
            s.execute("CREATE STREAM jdbc_s (id BIGINT)");
            s.execute("INSERT INTO jdbc_s VALUES (7)");
        }
        String wrong = refusal(port, "sluice", "not-the-password");
        check("wrong password", "28P01".equals(wrong), "SQLState " + wrong);
        String unknown = refusal(port, "jdbc_nobody", "x");
        check("unknown role", "28000".equals(unknown), "SQLState " + unknown);
        try (Connection c = connect(port, "jdbc_u", "jdbc-user-pw"); Statement s = c.createStatement()) {
            try {
                s.executeQuery("SELECT id FROM jdbc_s LIMIT 1");
                check("ungranted SELECT", false, "was allowed");
            } catch (SQLException e) {
                check("ungranted SELECT", "42501".equals(e.getSQLState()), "SQLState " + e.getSQLState());
            }
        }
        try (Connection c = connect(port, "sluice", superPassword); Statement s = c.createStatement()) {
            s.execute("GRANT SELECT ON jdbc_s TO jdbc_u");
        }
        try (Connection c = connect(port, "jdbc_u", "jdbc-user-pw"); Statement s = c.createStatement()) {
            ResultSet r = s.executeQuery("SELECT id FROM jdbc_s LIMIT 1");
            check("granted SELECT", r.next() && r.getLong(1) == 7, "no row 7");
            ResultSet who = s.executeQuery("SELECT current_user");
            check("current_user", who.next() && "jdbc_u".equals(who.getString(1)), "not jdbc_u");
        }
        if (failures == 0) {
            System.out.println("jdbc scram: ok");
        } else {
            System.exit(1);
        }
    }
}
