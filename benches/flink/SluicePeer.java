// Sluice's Flink peer: Apache Flink SQL over the `datagen` workload of
// crates/sluice-bench/src/flink.rs, in one long-lived JVM, tuned as a Flink
// user would tune it (see CONFIG below). Driven by `sluice-bench` over stdin:
//
//   java <flags> -cp <build>:<flink jars> SluicePeer <parallelism>
//
// prints `READY …` once, then reads one command a line:
//
//   run <ID> <rows>      INSERT INTO a blackhole sink the query ID over a fresh
//                        `bid` table of <rows> rows (a new TableEnvironment, so
//                        a new catalog and a new local MiniCluster per run; the
//                        JIT stays warm because the JVM lives on); prints
//                        `RESULT key=value …`
//   sql <ID>             prints `SQL <ID> <query text>`, and
//   ddl <rows>           `DDL <the bid table's DDL on one line>` (the Rust
//                        side checks that its texts are these)
//   explain <ID> <rows>  prints the optimized plan, then `END`
//   nexmark <ID> <events> <event rate> <watermark delay s> <query>
//                        INSERT INTO a blackhole sink <query> (the rest of
//                        the line: a Nexmark query of benches/nexmark, its
//                        SET lines dropped) over fresh `person`, `auction`
//                        and `bid` tables of NexmarkSource.java — Sluice's
//                        own generator's rows — of <events> global events,
//                        event time at <event rate> events/s; prints
//                        `RESULT …` as `run` does (<ID> names it there)
//   nexplain <events> <event rate> <delay> <query>   its plan, then `END`
//   quit                 exits
//
// A failed command prints one `ERROR <message>` line and the JVM lives on.
// Query IDs: Q0..Q5 and the updating U1..U4 (the queries of flink::QUERIES)
// and the generator-only baselines B2, B3, B5, B6 (`SELECT <the columns a
// query reads> FROM bid`; Q0 is the baseline of Q0 and Q1).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableDescriptor;
import org.apache.flink.table.api.TableResult;

public final class SluicePeer {

    /** ID -> {blackhole sink columns, query}. The query texts are flink::QUERIES's. */
    private static final Map<String, String[]> QUERIES = new LinkedHashMap<>();

    /**
     * The queries mini-batch is on for: the aggregates (it changes no other
     * plan), and every Nexmark query (ids qN) with state: their aggregates,
     * and their regular joins, which mini-batch also batches since Flink 1.19.
     */
    private static final Set<String> AGGREGATES = Set.of("Q3", "Q4", "Q5", "U1", "U4");

    static {
        QUERIES.put("Q0", new String[] {
            "auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP_LTZ(3)",
            "SELECT auction, bidder, price, ts FROM bid"});
        QUERIES.put("Q1", new String[] {
            "auction BIGINT, bidder BIGINT, price_eur BIGINT, ts TIMESTAMP_LTZ(3)",
            "SELECT auction, bidder, price * 908 / 1000 AS price_eur, ts FROM bid"});
        QUERIES.put("Q2", new String[] {
            "auction BIGINT, price BIGINT",
            "SELECT auction, price FROM bid WHERE auction % 123 = 0"});
        QUERIES.put("Q3", new String[] {
            "window_start TIMESTAMP(3), window_end TIMESTAMP(3), auction BIGINT, cnt BIGINT, max_price BIGINT",
            "SELECT window_start, window_end, auction, COUNT(*) AS cnt, MAX(price) AS max_price "
                + "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
                + "GROUP BY window_start, window_end, auction"});
        QUERIES.put("Q4", new String[] {
            "window_start TIMESTAMP(3), window_end TIMESTAMP(3), auction BIGINT, cnt BIGINT, max_price BIGINT",
            "SELECT window_start, window_end, auction, COUNT(*) AS cnt, MAX(price) AS max_price "
                + "FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
                + "GROUP BY window_start, window_end, auction"});
        QUERIES.put("Q5", new String[] {
            "window_start TIMESTAMP(3), sum_price BIGINT, cnt BIGINT",
            "SELECT window_start, SUM(price) AS sum_price, COUNT(*) AS cnt "
                + "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
                + "GROUP BY window_start, window_end"});
        // Updating queries: results that change as rows come (a changelog
        // into the sink), but U3's.
        QUERIES.put("U1", new String[] {
            "auction BIGINT, cnt BIGINT, max_price BIGINT",
            "SELECT auction, COUNT(*) AS cnt, MAX(price) AS max_price FROM bid GROUP BY auction"});
        QUERIES.put("U2", new String[] {
            "auction BIGINT, bidder BIGINT, price BIGINT, rn BIGINT",
            "SELECT auction, bidder, price, rn FROM (SELECT auction, bidder, price, "
                + "ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bid) WHERE rn <= 3"});
        QUERIES.put("U3", new String[] {
            "auction BIGINT, price BIGINT, avg_price BIGINT",
            "SELECT auction, price, AVG(price) OVER (PARTITION BY auction ORDER BY ts "
                + "ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price FROM bid"});
        QUERIES.put("U4", new String[] {
            "bucket BIGINT, auctions BIGINT",
            "SELECT max_price / 1000 AS bucket, COUNT(*) AS auctions "
                + "FROM (SELECT auction, MAX(price) AS max_price FROM bid GROUP BY auction) GROUP BY max_price / 1000"});
        // Generator-only baselines: the columns the other queries read.
        QUERIES.put("B2", new String[] {"auction BIGINT, price BIGINT", "SELECT auction, price FROM bid"});
        QUERIES.put("B3", new String[] {
            "auction BIGINT, price BIGINT, ts TIMESTAMP_LTZ(3)", "SELECT auction, price, ts FROM bid"});
        QUERIES.put("B5", new String[] {"price BIGINT, ts TIMESTAMP_LTZ(3)", "SELECT price, ts FROM bid"});
        QUERIES.put("B6", new String[] {
            "auction BIGINT, bidder BIGINT, price BIGINT", "SELECT auction, bidder, price FROM bid"});
    }

    /** The `bid` table: flink::ddl's text with CREATE TABLE. */
    static String ddl(long n) {
        return "CREATE TABLE bid (\n"
            + "  seq BIGINT, auction BIGINT, bidder BIGINT, price BIGINT,\n"
            + "  channel VARCHAR(10), extra VARCHAR(40),\n"
            + "  ts AS TO_TIMESTAMP_LTZ(seq, 3),\n"
            + "  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND\n"
            + ") WITH (\n"
            + "  'connector' = 'datagen',\n"
            + "  'number-of-rows' = '" + n + "',\n"
            // datagen's default is 10 000 rows/s; this budget is never reached
            + "  'rows-per-second' = '1000000000000',\n"
            + "  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '1', 'fields.seq.end' = '" + n + "',\n"
            + "  'fields.auction.kind' = 'random', 'fields.auction.min' = '1000', 'fields.auction.max' = '1999',\n"
            + "  'fields.bidder.kind'  = 'random', 'fields.bidder.min'  = '1',    'fields.bidder.max'  = '100000',\n"
            + "  'fields.price.kind'   = 'random', 'fields.price.min'   = '1',    'fields.price.max'   = '10000',\n"
            + "  'fields.channel.kind' = 'random', 'fields.channel.length' = '10',\n"
            + "  'fields.extra.kind'   = 'random', 'fields.extra.length'   = '40'\n"
            + ")";
    }

    /** Nexmark queries without state (mini-batch would only add its assigner). */
    private static final Set<String> STATELESS = Set.of("q0", "q1", "q2", "q14", "q21", "q22");

    static boolean miniBatch(String id) {
        return AGGREGATES.contains(id) || (id.startsWith("q") && !STATELESS.contains(id));
    }

    /** Flink as its users tune it; the keys are those of Flink's config.yaml. */
    static Map<String, String> config(int parallelism, String id) {
        Map<String, String> c = new TreeMap<>();
        c.put("execution.runtime-mode", "STREAMING");
        c.put("parallelism.default", String.valueOf(parallelism));
        c.put("table.exec.resource.default-parallelism", String.valueOf(parallelism));
        c.put("pipeline.object-reuse", "true");
        // Checkpointing stays off (no execution.checkpointing.interval), as
        // for Sluice; state is on the heap (the default backend, hashmap).
        boolean miniBatch = miniBatch(id);
        c.put("table.exec.mini-batch.enabled", String.valueOf(miniBatch));
        if (miniBatch) {
            c.put("table.exec.mini-batch.allow-latency", "1 s");
            c.put("table.exec.mini-batch.size", "5000");
        }
        return c;
    }

    private static TableEnvironment tables(int parallelism, String id, long n) {
        String[] q = query(id);
        EnvironmentSettings settings = EnvironmentSettings.newInstance()
            .inStreamingMode()
            .withConfiguration(Configuration.fromMap(config(parallelism, id)))
            .build();
        TableEnvironment env = TableEnvironment.create(settings);
        env.executeSql(ddl(n));
        env.executeSql("CREATE TABLE sink (" + q[0] + ") WITH ('connector' = 'blackhole')");
        return env;
    }

    /** The Nexmark tables (NexmarkSource.ddl) in a fresh environment. */
    private static TableEnvironment nexmarkTables(int parallelism, String id, long events, long rate, int delay) {
        EnvironmentSettings settings = EnvironmentSettings.newInstance()
            .inStreamingMode()
            .withConfiguration(Configuration.fromMap(config(parallelism, id)))
            .build();
        TableEnvironment env = TableEnvironment.create(settings);
        for (String ddl : NexmarkSource.ddl(events, rate, delay)) {
            env.executeSql(ddl);
        }
        return env;
    }

    /** A blackhole sink whose schema is the query's (its names made unique by the planner). */
    private static TableDescriptor blackhole() {
        return TableDescriptor.forConnector("blackhole").build();
    }

    private static String[] query(String id) {
        String[] q = QUERIES.get(id);
        if (q == null) {
            throw new IllegalArgumentException("unknown query " + id + " (known: " + QUERIES.keySet() + ")");
        }
        return q;
    }

    private static long[] gc() {
        long count = 0, ms = 0;
        for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
            count += Math.max(0, b.getCollectionCount());
            ms += Math.max(0, b.getCollectionTime());
        }
        return new long[] {count, ms};
    }

    private static void run(int parallelism, String id, long n) throws Exception {
        measure(parallelism, id, n, () -> tables(parallelism, id, n),
            env -> env.executeSql("INSERT INTO sink " + query(id)[1]));
    }

    /** A Nexmark query's run over `events` global events; `rows` in RESULT counts those. */
    private static void nexmark(int parallelism, String id, long events, long rate, int delay, String sql)
        throws Exception {
        measure(parallelism, id, events, () -> nexmarkTables(parallelism, id, events, rate, delay),
            env -> env.sqlQuery(sql).executeInsert(blackhole()));
    }

    interface Setup {
        TableEnvironment get() throws Exception;
    }

    interface Insert {
        TableResult run(TableEnvironment env) throws Exception;
    }

    private static void measure(int parallelism, String id, long n, Setup setup, Insert insert) throws Exception {
        long[] gc0 = gc();
        long t0 = System.nanoTime();
        TableEnvironment env = setup.get();
        long t1 = System.nanoTime();
        TableResult result = insert.run(env);
        result.await();
        long t2 = System.nanoTime();
        JobExecutionResult job = result.getJobClient().orElseThrow().getJobExecutionResult().get();
        long netMs = job.getNetRuntime(TimeUnit.MILLISECONDS);
        long[] gc1 = gc();
        double execMs = (t2 - t1) / 1e6;
        // Outside the measured time: start the next run from a collected
        // heap. Before RESULT, so that the caller's next step (a Sluice run)
        // does not share the machine with a full collection of the heap.
        System.gc();
        System.out.printf(
            "RESULT id=%s p=%d rows=%d minibatch=%s object_reuse=true setup_ms=%.0f exec_wall_ms=%.0f"
                + " net_runtime_ms=%d rows_per_s_net=%.0f rows_per_s_exec=%.0f gc_count=%d gc_ms=%d%n",
            id, parallelism, n, miniBatch(id), (t1 - t0) / 1e6, execMs, netMs,
            n / (Math.max(netMs, 1) / 1000.0), n / (Math.max(execMs, 1) / 1000.0), gc1[0] - gc0[0],
            gc1[1] - gc0[1]);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        int parallelism = Integer.parseInt(args[0]);
        StringJoiner conf = new StringJoiner(" ");
        config(parallelism, "Q3").forEach((k, v) -> conf.add(k + "=" + v.replace(' ', '_')));
        System.out.println("CONFIG " + conf);
        System.out.println("READY flink=" + EnvironmentInformation.getVersion()
            + " java=" + System.getProperty("java.runtime.version")
            + " vm=" + System.getProperty("java.vm.name").replace(' ', '_')
            + " max_heap_mib=" + Runtime.getRuntime().maxMemory() / (1 << 20)
            + " p=" + parallelism);
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] w = line.trim().split("\\s+");
            try {
                switch (w[0]) {
                    case "run":
                        run(parallelism, w[1], Long.parseLong(w[2]));
                        break;
                    case "sql":
                        System.out.println("SQL " + w[1] + " " + query(w[1])[1]);
                        break;
                    case "ddl":
                        System.out.println("DDL " + ddl(Long.parseLong(w[1])).replace('\n', ' '));
                        break;
                    case "explain":
                        String plan = tables(parallelism, w[1], Long.parseLong(w[2]))
                            .explainSql("INSERT INTO sink " + query(w[1])[1]);
                        System.out.println(plan);
                        System.out.println("END");
                        break;
                    case "nexmark": {
                        String[] n = line.trim().split("\\s+", 6);
                        nexmark(parallelism, n[1], Long.parseLong(n[2]), Long.parseLong(n[3]),
                            Integer.parseInt(n[4]), n[5]);
                        break;
                    }
                    case "nexplain": {
                        String[] n = line.trim().split("\\s+", 5);
                        TableEnvironment env = nexmarkTables(parallelism, "q", Long.parseLong(n[1]),
                            Long.parseLong(n[2]), Integer.parseInt(n[3]));
                        System.out.println(env.sqlQuery(n[4]).explain());
                        System.out.println("END");
                        break;
                    }
                    case "quit":
                        System.out.flush();
                        System.exit(0);
                        break;
                    case "":
                        break;
                    default:
                        throw new IllegalArgumentException("unknown command " + w[0]);
                }
            } catch (Throwable e) {
                Throwable root = e;
                while (root.getCause() != null) {
                    root = root.getCause();
                }
                System.out.println(("ERROR " + e + " (cause: " + root + ")").replace('\n', ' '));
            }
            System.out.flush();
        }
        System.exit(0);
    }
}
