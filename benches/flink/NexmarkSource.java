// The Flink peer's Nexmark tables: a table connector, `sluice-nexmark`, whose
// rows are Sluice's own Nexmark generator's (NexmarkRows.java is a port of
// crates/sluice-connectors/src/nexmark, checked value for value against it by
// crates/sluice-bench/tests/nexmark_java.rs). So Flink and Sluice read the
// very same rows in the side-by-side runs of the Nexmark queries, and a
// query's figure compares engines, not generators.
//
//   CREATE TABLE bid (auction BIGINT, …, date_time TIMESTAMP(3), extra VARCHAR,
//     WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
//   WITH ('connector' = 'sluice-nexmark', 'table' = 'bid',
//         'events.max' = '10000000', 'event.rate' = '10000000')
//
// Options as Sluice's `nexmark` connector: `events.max` counts the global
// events of all three tables (a table reads its share of them), `event.rate`
// is events per second of event time, `seed` and `base.time` (ms) as there.
//
// Like Sluice's generator (and nexmark-flink's source), the connector makes
// only the columns a query reads (projection push-down). It runs as a FLIP-27
// DataGeneratorSource: the sequence 0..rows-1 is cut into one range per
// parallel reader, and the value v of reader i's range is mapped to the
// table's row (v mod s) * p + v / s (s = rows / p), so reader i makes rows
// i, i + p, i + 2p … and the readers' event times advance together, as
// Sluice's partitions do (partition i of p owns events n with n % p == i).
// The mapping is a bijection on 0..rows-1 whatever ranges the readers get,
// so every row is made exactly once.

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.SourceProvider;
import org.apache.flink.table.connector.source.abilities.SupportsProjectionPushDown;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalTypeRoot;

public final class NexmarkSource implements DynamicTableSourceFactory {

    static final ConfigOption<String> TABLE = ConfigOptions.key("table").stringType().noDefaultValue();
    static final ConfigOption<Long> EVENTS = ConfigOptions.key("events.max").longType().noDefaultValue();
    static final ConfigOption<Long> EVENT_RATE = ConfigOptions.key("event.rate").longType().defaultValue(10_000L);
    static final ConfigOption<Long> SEED = ConfigOptions.key("seed").longType().defaultValue(0L);
    static final ConfigOption<Long> BASE_TIME =
        ConfigOptions.key("base.time").longType().defaultValue(1_700_000_000_000L);

    @Override
    public String factoryIdentifier() {
        return "sluice-nexmark";
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Set.of(TABLE, EVENTS);
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return Set.of(EVENT_RATE, SEED, BASE_TIME);
    }

    @Override
    public DynamicTableSource createDynamicTableSource(Context context) {
        FactoryUtil.TableFactoryHelper helper = FactoryUtil.createTableFactoryHelper(this, context);
        helper.validate();
        ReadableConfig o = helper.getOptions();
        int table = tableOf(o.get(TABLE));
        Spec spec = new Spec(table, o.get(EVENTS), o.get(EVENT_RATE), o.get(SEED), o.get(BASE_TIME));
        return new Table(spec, context.getPhysicalRowDataType());
    }

    static int tableOf(String name) {
        switch (name.trim().toLowerCase()) {
            case "person": return NexmarkRows.PERSON;
            case "auction": return NexmarkRows.AUCTION;
            case "bid": return NexmarkRows.BID;
            default: throw new ValidationException("unknown nexmark table '" + name + "'");
        }
    }

    /** What to generate (the table's options). */
    static final class Spec implements java.io.Serializable {
        final int table;
        final long events, eventRate, seed, baseTime;

        Spec(int table, long events, long eventRate, long seed, long baseTime) {
            this.table = table;
            this.events = events;
            this.eventRate = eventRate;
            this.seed = seed;
            this.baseTime = baseTime;
        }
    }

    /** The scan, with the columns the query reads. */
    static final class Table implements ScanTableSource, SupportsProjectionPushDown {
        private final Spec spec;
        private DataType produced;

        Table(Spec spec, DataType produced) {
            this.spec = spec;
            this.produced = produced;
            columnsOf(produced); // the declared columns must be the generator's
        }

        /** For each produced field, the generator's column of that name. */
        private int[] columnsOf(DataType type) {
            List<String> names = DataType.getFieldNames(type);
            List<String> all = Arrays.asList(NexmarkRows.columns(spec.table));
            int[] columns = new int[names.size()];
            for (int i = 0; i < columns.length; i++) {
                columns[i] = all.indexOf(names.get(i));
                if (columns[i] < 0) {
                    throw new ValidationException(
                        "nexmark column '" + names.get(i) + "' is not one of " + all);
                }
            }
            return columns;
        }

        @Override
        public ChangelogMode getChangelogMode() {
            return ChangelogMode.insertOnly();
        }

        @Override
        public ScanRuntimeProvider getScanRuntimeProvider(ScanContext context) {
            TypeInformation<RowData> type = context.createTypeInformation(produced);
            List<DataType> types = DataType.getFieldDataTypes(produced);
            byte[] kinds = new byte[types.size()];
            for (int i = 0; i < kinds.length; i++) {
                LogicalTypeRoot root = types.get(i).getLogicalType().getTypeRoot();
                kinds[i] = root == LogicalTypeRoot.BIGINT ? Rows.LONG
                    : root == LogicalTypeRoot.VARCHAR || root == LogicalTypeRoot.CHAR ? Rows.STRING
                    : Rows.TIME;
            }
            long rows = NexmarkRows.rowsIn(spec.table, spec.events);
            return SourceProvider.of(
                new DataGeneratorSource<>(new Rows(spec, columnsOf(produced), kinds, rows), rows, type));
        }

        @Override
        public DynamicTableSource copy() {
            return new Table(spec, produced);
        }

        @Override
        public String asSummaryString() {
            return "sluice-nexmark";
        }

        @Override
        public boolean supportsNestedProjection() {
            return false;
        }

        @Override
        public void applyProjection(int[][] projectedFields, DataType producedDataType) {
            columnsOf(producedDataType);
            produced = producedDataType;
        }
    }

    /** Sequence value → the table's row, with the produced columns only. */
    static final class Rows implements GeneratorFunction<Long, RowData> {
        static final byte LONG = 0, STRING = 1, TIME = 2;
        private final Spec spec;
        private final int[] columns;
        private final byte[] kinds;
        private final long rows;
        private transient NexmarkRows generator;
        private transient Object[] values;
        private transient long perReader;
        private transient int readers;

        Rows(Spec spec, int[] columns, byte[] kinds, long rows) {
            this.spec = spec;
            this.columns = columns;
            this.kinds = kinds;
            this.rows = rows;
        }

        @Override
        public void open(SourceReaderContext context) {
            boolean[] wanted = new boolean[NexmarkRows.columns(spec.table).length];
            for (int c : columns) {
                wanted[c] = true;
            }
            generator = new NexmarkRows(spec.table, spec.seed, spec.baseTime, spec.eventRate, wanted);
            values = new Object[wanted.length];
            readers = Math.max(1, context.currentParallelism());
            perReader = rows / readers;
        }

        /** The bijection of the class comment (the last rows % p rows map to themselves). */
        long rowOf(long v) {
            if (perReader == 0 || v >= perReader * readers) {
                return v;
            }
            return (v % perReader) * readers + v / perReader;
        }

        @Override
        public RowData map(Long v) {
            generator.fill(NexmarkRows.eventOf(spec.table, rowOf(v)), values);
            GenericRowData row = new GenericRowData(columns.length);
            for (int i = 0; i < columns.length; i++) {
                Object value = values[columns[i]];
                switch (kinds[i]) {
                    case LONG:
                        row.setField(i, value);
                        break;
                    case STRING:
                        row.setField(i, StringData.fromBytes((byte[]) value));
                        break;
                    default:
                        row.setField(i, TimestampData.fromEpochMillis((Long) value));
                }
            }
            return row;
        }
    }

    /**
     * The three tables' DDL for Flink, as sluice-bench declares them for
     * Sluice: the generator's columns (NOT NULL, as in Sluice's schema),
     * watermarks `watermarkDelayS` behind the newest event time.
     */
    static List<String> ddl(long events, long eventRate, int watermarkDelayS) {
        String wm = watermarkDelayS > 0 ? " - INTERVAL '" + watermarkDelayS + "' SECOND" : "";
        List<String> out = new ArrayList<>();
        String[] names = {"person", "auction", "bid"};
        for (int t = 0; t < names.length; t++) {
            StringBuilder ddl = new StringBuilder("CREATE TABLE " + names[t] + " (");
            for (String c : NexmarkRows.columns(t)) {
                String type = c.equals("date_time") || c.equals("expires") ? "TIMESTAMP(3)"
                    : LONG_COLUMNS.contains(c) ? "BIGINT" : "VARCHAR";
                ddl.append(c).append(' ').append(type).append(" NOT NULL, ");
            }
            ddl.append("WATERMARK FOR date_time AS date_time").append(wm).append(") WITH (")
                .append("'connector' = 'sluice-nexmark', 'table' = '").append(names[t]).append("', ")
                .append("'events.max' = '").append(events).append("', ")
                .append("'event.rate' = '").append(eventRate).append("')");
            out.add(ddl.toString());
        }
        return out;
    }

    private static final Set<String> LONG_COLUMNS = Set.of(
        "id", "initial_bid", "reserve", "seller", "category", "auction", "bidder", "price");
}
