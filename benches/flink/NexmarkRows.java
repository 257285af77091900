// Sluice's Nexmark event generator (crates/sluice-connectors/src/nexmark/) in
// plain Java 17, for the Flink benchmark peer: for the same seed, base time and
// events_per_second_for_timestamps it makes, value for value, the rows Sluice's
// NexmarkGenerator makes, so that Flink and Sluice are measured over identical
// input. crates/sluice-bench/tests/nexmark_java.rs checks it row by row against
// the Rust generator, all columns and projections; keep the two in step.
//
// The model (see the Rust module's documentation): global events n = 0, 1, 2 …;
// within each block of 50, n % 50 == 0 is a person, 1..=3 an auction, the rest
// bids. Ids and event times are arithmetic in n; every event draws from its own
// SplitMix64 stream seeded from (seed, n), so a row depends only on the seed,
// the time model and n. The seed and the rate are u64 on the Rust side: here
// they are the same 64 bits in a long, and the arithmetic on them is unsigned.
//
// Columns a query does not read need not be generated (`wanted`): their random
// draws are still made, or skipped by exactly as many draws, so the other
// columns keep the values they have when every column is generated — as in
// Rust, where NexmarkGenerator::skip_columns empties the unread string columns
// and changes nothing else.
//
// Prices go through exp(), as in Rust. Math.exp is used: it returns the bits of
// Rust's (glibc's) exp for all but ~0.25% of the arguments (StrictMath.exp:
// ~10%), and a last-bit difference changes a price only if exp(x) * 100 lies
// within an ulp of a half cent: no price differed in 20 million draws.
//
// An instance is not thread-safe (it holds the current random stream and a
// scratch buffer): one per thread.
//
// Usage: java NexmarkRows <table> <seed> <baseTimeMs> <eventsPerSecond> <events> <columns or *>
// prints the table's rows among the first <events> global events, one a line,
// the wanted columns (comma-separated names, or * for all) in schema order,
// tab-separated; strings as text, timestamps as ms since the epoch.

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

public final class NexmarkRows {
    public static final int PERSON = 0, AUCTION = 1, BID = 2;

    private static final String[] TABLE_NAMES = {"person", "auction", "bid"};

    private static final String[][] COLUMNS = {
        {"id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra"},
        {
            "id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
            "category", "extra"
        },
        {"auction", "bidder", "price", "channel", "url", "date_time", "extra"},
    };

    // Column numbers (schema order, as nexmark_schema).
    private static final int P_ID = 0, P_NAME = 1, P_EMAIL = 2, P_CARD = 3, P_CITY = 4, P_STATE = 5,
            P_DATE_TIME = 6, P_EXTRA = 7;
    private static final int A_ID = 0, A_ITEM_NAME = 1, A_DESCRIPTION = 2, A_INITIAL_BID = 3, A_RESERVE = 4,
            A_DATE_TIME = 5, A_EXPIRES = 6, A_SELLER = 7, A_CATEGORY = 8, A_EXTRA = 9;
    private static final int B_AUCTION = 0, B_BIDDER = 1, B_PRICE = 2, B_CHANNEL = 3, B_URL = 4,
            B_DATE_TIME = 5, B_EXTRA = 6;

    // ---- ids.rs ----
    private static final long FIRST_PERSON_ID = 1000;
    private static final long FIRST_AUCTION_ID = 1000;
    private static final long FIRST_CATEGORY_ID = 10;
    private static final long CATEGORIES = 5;
    private static final long PROPORTION_PERSON = 1;
    private static final long PROPORTION_AUCTION = 3;
    private static final long PROPORTION_TOTAL = 50;
    private static final long PROPORTION_BID = PROPORTION_TOTAL - PROPORTION_PERSON - PROPORTION_AUCTION;
    private static final long ACTIVE_PEOPLE = 1000;
    private static final long IN_FLIGHT_AUCTIONS = 100;
    private static final long PERSON_ID_LEAD = 10;
    private static final long AUCTION_ID_LEAD = 10;
    private static final long HOT_BLOCK = 100;
    private static final long HOT_AUCTION_ODDS = 2;
    private static final long HOT_SELLER_ODDS = 4;
    private static final long HOT_BIDDER_ODDS = 4;

    // ---- random.rs ----
    private static final long GOLDEN_GAMMA = 0x9E3779B97F4A7C15L;
    private static final long DOMAIN_EVENT = 0;
    private static final long DOMAIN_CHANNEL = 0x6368616e6e656c00L; // "channel\0"
    /** Rust's std::f64::consts::LN_10. */
    private static final double LN_10 = 2.302585092994046;
    private static final double PRICE_SCALE = 6.0 * LN_10;
    private static final double UNIT_SCALE = 1.0 / (double) (1L << 53);

    // ---- strings.rs ----
    private static final long STRING_LENGTH_MIN = 3;
    private static final int STRING_CHARS_PER_DRAW = 4;
    private static final int EXACT_CHARS_PER_DRAW = 8;

    // ---- person.rs ----
    private static final String[] US_STATES = {"AZ", "CA", "ID", "OR", "WA", "WY"};
    private static final String[] US_CITIES = {
        "Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
        "Cheyenne"
    };
    private static final String[] FIRST_NAMES = {
        "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"
    };
    private static final String[] LAST_NAMES = {
        "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"
    };
    private static final int PERSON_SIZE_AVERAGE = 200;
    private static final int CREDIT_CARD_LEN = 19;
    /** push_string bounds of the two parts of an email address. */
    private static final long EMAIL_USER_LEN_MAX = 7, EMAIL_DOMAIN_LEN_MAX = 5;

    // ---- auction.rs ----
    private static final int AUCTION_SIZE_AVERAGE = 500;
    private static final long ITEM_NAME_LEN_MAX = 20;
    private static final long DESCRIPTION_LEN_MAX = 100;
    private static final long EVENTS_FOR_IN_FLIGHT_AUCTIONS = IN_FLIGHT_AUCTIONS * PROPORTION_TOTAL / PROPORTION_AUCTION;

    // ---- bid.rs, channels.rs ----
    private static final int BID_SIZE_AVERAGE = 100;
    private static final int BID_SIZE_FIXED = 4 * 8;
    private static final long HOT_CHANNEL_ODDS = 2;
    private static final String[] HOT_CHANNELS = {"Google", "Facebook", "Baidu", "Apple"};
    private static final int CHANNELS = 10_000;
    private static final long CHANNEL_ID_ODDS = 10;

    // Shared, immutable byte[] values (callers must not modify returned arrays).
    private static final byte[] EMPTY = new byte[0];
    private static final byte[][] STATE_BYTES = utf8All(US_STATES);
    private static final byte[][] CITY_BYTES = utf8All(US_CITIES);
    private static final byte[][] HOT_CHANNEL_BYTES = utf8All(HOT_CHANNELS);
    /** "first last" for first * LAST_NAMES.length + last. */
    private static final byte[][] NAME_BYTES = names();
    private static final byte[] AT_DOT_COM = utf8(".com");
    private static final byte[] BASE_URL = utf8("https://www.nexmark.com/");
    private static final byte[] URL_TAIL = utf8("item.htm?query=1");

    /** u64::MAX / 1_000_000: the largest n whose n * 1_000_000 µs fits in a u64. */
    private static final long MICROS_LIMIT = Long.divideUnsigned(-1L, 1_000_000L);

    private final int table;
    private final long seed;
    private final long baseTimeMs;
    /** events_per_second_for_timestamps, at least 1 (unsigned). */
    private final long eventsPerSecond;
    /** eventsPerSecond * 1000 if it fits in a positive long, else 0 (then the slow path). */
    private final long eventsPerMillisecondScaled;
    private final boolean[] wanted;

    /** State of the current random stream (the event's; a channel's while one is built). */
    private long state;
    /** Reused buffer for composing string values. */
    private final byte[] scratch = new byte[256];
    /** Channel table, built entry by entry on first use (a pure function of seed and number). */
    private byte[][] hotUrls;
    private byte[][] channelNames;
    private byte[][] channelUrls;

    /** Column names of the table in schema order, as Sluice's nexmark_schema. */
    public static String[] columns(int table) {
        return COLUMNS[checkTable(table)].clone();
    }

    /** wanted[c] says whether column c is generated (null = all). */
    public NexmarkRows(int table, long seed, long baseTimeMs, long eventsPerSecondForTimestamps, boolean[] wanted) {
        this.table = checkTable(table);
        int width = COLUMNS[table].length;
        if (wanted == null) {
            wanted = new boolean[width];
            Arrays.fill(wanted, true);
        } else if (wanted.length != width) {
            throw new IllegalArgumentException(
                    "wanted has " + wanted.length + " entries; table " + TABLE_NAMES[table] + " has " + width + " columns");
        }
        this.wanted = wanted.clone();
        this.seed = seed;
        this.baseTimeMs = baseTimeMs;
        // As EventClock::new: a zero rate is taken as 1 event/s.
        this.eventsPerSecond = eventsPerSecondForTimestamps == 0 ? 1 : eventsPerSecondForTimestamps;
        this.eventsPerMillisecondScaled =
                this.eventsPerSecond > 0 && this.eventsPerSecond <= Long.MAX_VALUE / 1000 ? this.eventsPerSecond * 1000 : 0;
    }

    /** The global event number of the table's index-th row in a single-partition run. */
    public static long eventOf(int table, long index) {
        if (index < 0) {
            throw new IllegalArgumentException("negative row index " + index);
        }
        switch (checkTable(table)) {
            case PERSON:
                return index * PROPORTION_TOTAL;
            case AUCTION:
                return index / PROPORTION_AUCTION * PROPORTION_TOTAL + PROPORTION_PERSON + index % PROPORTION_AUCTION;
            default:
                return index / PROPORTION_BID * PROPORTION_TOTAL + PROPORTION_PERSON + PROPORTION_AUCTION
                        + index % PROPORTION_BID;
        }
    }

    /** How many of the table's rows the first `events` global events hold. */
    public static long rowsIn(int table, long events) {
        if (events < 0) {
            throw new IllegalArgumentException("negative event count " + events);
        }
        long blocks = events / PROPORTION_TOTAL;
        long rest = events % PROPORTION_TOTAL;
        switch (checkTable(table)) {
            case PERSON:
                return blocks * PROPORTION_PERSON + Math.min(rest, PROPORTION_PERSON);
            case AUCTION:
                return blocks * PROPORTION_AUCTION + Math.min(Math.max(rest - PROPORTION_PERSON, 0), PROPORTION_AUCTION);
            default:
                return blocks * PROPORTION_BID + Math.max(rest - PROPORTION_PERSON - PROPORTION_AUCTION, 0);
        }
    }

    /**
     * Fills out[c] for every wanted column c of the row made by global event n (n must be an event of this
     * table): Long for BIGINT columns, byte[] (UTF-8) for VARCHAR, Long milliseconds since the epoch for
     * TIMESTAMP columns; other slots untouched. byte[] values may be shared between rows (channel names and
     * URLs, names, cities, states, empty strings): never modify them.
     */
    public void fill(long n, Object[] out) {
        int kind = eventKind(n);
        if (kind != table) {
            throw new IllegalArgumentException(
                    "event " + Long.toUnsignedString(n) + " is a " + TABLE_NAMES[kind] + ", not a " + TABLE_NAMES[table]);
        }
        state = streamState(seed, DOMAIN_EVENT, n);
        switch (table) {
            case PERSON:
                fillPerson(n, out);
                break;
            case AUCTION:
                fillAuction(n, out);
                break;
            default:
                fillBid(n, out);
                break;
        }
    }

    // ---- person.rs ----

    private void fillPerson(long n, Object[] out) {
        final boolean[] w = wanted;
        if (w[P_ID]) {
            out[P_ID] = Long.valueOf(lastBase0PersonId(n) + FIRST_PERSON_ID);
        }
        int first = (int) below(FIRST_NAMES.length);
        int last = (int) below(LAST_NAMES.length);
        byte[] name = NAME_BYTES[first * LAST_NAMES.length + last];
        if (w[P_NAME]) {
            out[P_NAME] = name;
        }
        int size = 8 + name.length;

        if (w[P_EMAIL] || w[P_EXTRA]) {
            byte[] buf = scratch;
            int end = pushString(EMAIL_USER_LEN_MAX, (byte) ' ', buf, 0);
            buf[end++] = '@';
            end = pushString(EMAIL_DOMAIN_LEN_MAX, (byte) ' ', buf, end);
            System.arraycopy(AT_DOT_COM, 0, buf, end, AT_DOT_COM.length);
            end += AT_DOT_COM.length;
            if (w[P_EMAIL]) {
                out[P_EMAIL] = Arrays.copyOf(buf, end);
            }
            size += end;
        } else {
            skipString(EMAIL_USER_LEN_MAX);
            skipString(EMAIL_DOMAIN_LEN_MAX);
        }

        if (w[P_CARD]) {
            byte[] card = new byte[CREDIT_CARD_LEN];
            int at = 0;
            for (int group = 0; group < 4; group++) {
                if (group > 0) {
                    card[at++] = ' ';
                }
                int value = (int) below(10_000);
                card[at++] = (byte) ('0' + value / 1000 % 10);
                card[at++] = (byte) ('0' + value / 100 % 10);
                card[at++] = (byte) ('0' + value / 10 % 10);
                card[at++] = (byte) ('0' + value % 10);
            }
            out[P_CARD] = card;
        } else {
            state += 4 * GOLDEN_GAMMA; // four draws
        }
        size += CREDIT_CARD_LEN;

        byte[] city = CITY_BYTES[(int) below(US_CITIES.length)];
        byte[] usState = STATE_BYTES[(int) below(US_STATES.length)];
        if (w[P_CITY]) {
            out[P_CITY] = city;
        }
        if (w[P_STATE]) {
            out[P_STATE] = usState;
        }
        size += city.length + usState.length;

        if (w[P_DATE_TIME]) {
            out[P_DATE_TIME] = Long.valueOf(timeMs(n));
        }
        if (w[P_EXTRA]) {
            out[P_EXTRA] = extra(size, PERSON_SIZE_AVERAGE);
        }
    }

    // ---- auction.rs ----

    private void fillAuction(long n, Object[] out) {
        final boolean[] w = wanted;
        long timeMs = timeMs(n);
        if (w[A_ID]) {
            out[A_ID] = Long.valueOf(lastBase0AuctionId(n) + FIRST_AUCTION_ID);
        }
        long seller = nextSellerId(n);
        if (w[A_SELLER]) {
            out[A_SELLER] = Long.valueOf(seller);
        }
        long category = FIRST_CATEGORY_ID + below(CATEGORIES);
        if (w[A_CATEGORY]) {
            out[A_CATEGORY] = Long.valueOf(category);
        }
        long initialBid = nextPrice();
        if (w[A_INITIAL_BID]) {
            out[A_INITIAL_BID] = Long.valueOf(initialBid);
        }
        if (w[A_DATE_TIME]) {
            out[A_DATE_TIME] = Long.valueOf(timeMs);
        }
        // auction_length_ms
        long horizonMs = timeMs(saturatingAddUnsigned(n, EVENTS_FOR_IN_FLIGHT_AUCTIONS)) - timeMs;
        long bound = Math.max(saturatingMul2(horizonMs), 1);
        long lengthMs = 1 + below(bound);
        if (w[A_EXPIRES]) {
            out[A_EXPIRES] = Long.valueOf(saturatingAdd(timeMs, lengthMs));
        }

        int size = 8;
        if (w[A_ITEM_NAME] || w[A_EXTRA]) {
            int end = pushString(ITEM_NAME_LEN_MAX, (byte) ' ', scratch, 0);
            if (w[A_ITEM_NAME]) {
                out[A_ITEM_NAME] = Arrays.copyOf(scratch, end);
            }
            size += end;
        } else {
            skipString(ITEM_NAME_LEN_MAX);
        }
        if (w[A_DESCRIPTION] || w[A_EXTRA]) {
            int end = pushString(DESCRIPTION_LEN_MAX, (byte) ' ', scratch, 0);
            if (w[A_DESCRIPTION]) {
                out[A_DESCRIPTION] = Arrays.copyOf(scratch, end);
            }
            size += end;
        } else {
            skipString(DESCRIPTION_LEN_MAX);
        }
        size += 5 * 8;

        if (w[A_RESERVE]) {
            out[A_RESERVE] = Long.valueOf(initialBid + nextPrice());
        } else {
            state += GOLDEN_GAMMA; // a price is one draw
        }
        if (w[A_EXTRA]) {
            out[A_EXTRA] = extra(size, AUCTION_SIZE_AVERAGE);
        }
    }

    // ---- bid.rs ----

    private void fillBid(long n, Object[] out) {
        final boolean[] w = wanted;
        long auction = nextBidAuctionId(n);
        if (w[B_AUCTION]) {
            out[B_AUCTION] = Long.valueOf(auction);
        }
        long bidder = nextBidderId(n);
        if (w[B_BIDDER]) {
            out[B_BIDDER] = Long.valueOf(bidder);
        }
        if (w[B_PRICE]) {
            out[B_PRICE] = Long.valueOf(nextPrice());
        } else {
            state += GOLDEN_GAMMA; // a price is one draw
        }
        boolean hot = below(HOT_CHANNEL_ODDS) > 0;
        int number = (int) (hot ? below(HOT_CHANNELS.length) : below(CHANNELS));
        if (w[B_CHANNEL]) {
            out[B_CHANNEL] = hot ? HOT_CHANNEL_BYTES[number] : channelName(number);
        }
        if (w[B_URL]) {
            out[B_URL] = hot ? hotUrl(number) : channelUrl(number);
        }
        if (w[B_DATE_TIME]) {
            out[B_DATE_TIME] = Long.valueOf(timeMs(n));
        }
        if (w[B_EXTRA]) {
            out[B_EXTRA] = extra(BID_SIZE_FIXED, BID_SIZE_AVERAGE);
        }
    }

    // ---- channels.rs ----

    private byte[] hotUrl(int index) {
        if (hotUrls == null) {
            long eventState = state;
            byte[][] urls = new byte[HOT_CHANNELS.length][];
            for (int i = 0; i < urls.length; i++) {
                state = streamState(seed, DOMAIN_CHANNEL, CHANNELS + i);
                byte[] buf = new byte[128];
                urls[i] = Arrays.copyOf(buf, pushBaseUrl(buf));
            }
            hotUrls = urls;
            state = eventState;
        }
        return hotUrls[index];
    }

    private byte[] channelName(int number) {
        buildChannel(number);
        return channelNames[number];
    }

    private byte[] channelUrl(int number) {
        buildChannel(number);
        return channelUrls[number];
    }

    private void buildChannel(int number) {
        if (channelNames == null) {
            channelNames = new byte[CHANNELS][];
            channelUrls = new byte[CHANNELS][];
        }
        if (channelNames[number] != null) {
            return;
        }
        // The channel's own stream; the event's is resumed after.
        long eventState = state;
        state = streamState(seed, DOMAIN_CHANNEL, number);
        byte[] buf = new byte[160];
        int end = pushBaseUrl(buf);
        String url = new String(buf, 0, end, StandardCharsets.UTF_8);
        if (below(CHANNEL_ID_ODDS) > 0) {
            // As the reference: Math.abs(Integer.reverse(number)).
            url += "&channel_id=" + Math.abs(Integer.reverse(number));
        }
        state = eventState;
        channelUrls[number] = utf8(url);
        channelNames[number] = utf8("channel-" + number);
    }

    /** https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1 into buf from 0; returns its end. */
    private int pushBaseUrl(byte[] buf) {
        System.arraycopy(BASE_URL, 0, buf, 0, BASE_URL.length);
        int end = BASE_URL.length;
        for (int i = 0; i < 3; i++) {
            end = pushString(5, (byte) '_', buf, end);
            buf[end++] = '/';
        }
        System.arraycopy(URL_TAIL, 0, buf, end, URL_TAIL.length);
        return end + URL_TAIL.length;
    }

    // ---- ids.rs ----

    /** 0 person, 1 auction, 2 bid: the kind of event n. */
    private static int eventKind(long n) {
        long offset = remU(n, PROPORTION_TOTAL);
        if (offset < PROPORTION_PERSON) {
            return PERSON;
        }
        return offset < PROPORTION_PERSON + PROPORTION_AUCTION ? AUCTION : BID;
    }

    private static long lastBase0PersonId(long n) {
        long epoch = divU(n, PROPORTION_TOTAL);
        long offset = remU(n, PROPORTION_TOTAL);
        offset = offset < PROPORTION_PERSON ? offset : PROPORTION_PERSON - 1;
        return epoch * PROPORTION_PERSON + offset;
    }

    private static long lastBase0AuctionId(long n) {
        long epoch = divU(n, PROPORTION_TOTAL);
        long offset = remU(n, PROPORTION_TOTAL);
        if (offset < PROPORTION_PERSON) {
            long blockStart = epoch * PROPORTION_AUCTION;
            return blockStart == 0 ? 0 : blockStart - 1;
        } else if (offset < PROPORTION_PERSON + PROPORTION_AUCTION) {
            return epoch * PROPORTION_AUCTION + offset - PROPORTION_PERSON;
        } else {
            return epoch * PROPORTION_AUCTION + PROPORTION_AUCTION - 1;
        }
    }

    private long nextBase0PersonId(long n) {
        long people = lastBase0PersonId(n) + 1;
        long active = Long.compareUnsigned(people, ACTIVE_PEOPLE) < 0 ? people : ACTIVE_PEOPLE;
        return people - active + below(active + PERSON_ID_LEAD);
    }

    private long nextBase0AuctionId(long n) {
        long last = lastBase0AuctionId(n);
        long first = Long.compareUnsigned(last, IN_FLIGHT_AUCTIONS) <= 0 ? 0 : last - IN_FLIGHT_AUCTIONS;
        return first + below(last - first + 1 + AUCTION_ID_LEAD);
    }

    private long nextSellerId(long n) {
        long base0 = below(HOT_SELLER_ODDS) > 0
                ? divU(lastBase0PersonId(n), HOT_BLOCK) * HOT_BLOCK
                : nextBase0PersonId(n);
        return base0 + FIRST_PERSON_ID;
    }

    private long nextBidderId(long n) {
        long base0 = below(HOT_BIDDER_ODDS) > 0
                ? divU(lastBase0PersonId(n), HOT_BLOCK) * HOT_BLOCK + 1
                : nextBase0PersonId(n);
        return base0 + FIRST_PERSON_ID;
    }

    private long nextBidAuctionId(long n) {
        long base0 = below(HOT_AUCTION_ODDS) > 0
                ? divU(lastBase0AuctionId(n), HOT_BLOCK) * HOT_BLOCK
                : nextBase0AuctionId(n);
        return base0 + FIRST_AUCTION_ID;
    }

    // ---- schedule.rs: EventClock::time_ms ----

    private long timeMs(long n) {
        long offsetMs;
        if (Long.compareUnsigned(n, MICROS_LIMIT) <= 0) {
            long micros = n * 1_000_000L;
            if (micros >= 0 && eventsPerMillisecondScaled > 0) {
                // floor(floor(a / b) / c) == floor(a / (b * c)) for non-negative integers.
                offsetMs = micros / eventsPerMillisecondScaled;
            } else {
                offsetMs = Long.divideUnsigned(Long.divideUnsigned(micros, eventsPerSecond), 1000);
            }
        } else {
            BigInteger wide = unsigned(n).multiply(BigInteger.valueOf(1_000_000))
                    .divide(unsigned(eventsPerSecond))
                    .divide(BigInteger.valueOf(1000));
            offsetMs = wide.bitLength() > 63 ? Long.MAX_VALUE : wide.longValue();
        }
        return saturatingAdd(baseTimeMs, offsetMs);
    }

    // ---- random.rs ----

    /** The SplitMix64 finaliser. */
    private static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** EventRng::for_key's starting state. */
    private static long streamState(long seed, long domain, long key) {
        return mix64(seed ^ mix64(key ^ domain));
    }

    /** High 64 bits of the unsigned 128-bit product a * b. */
    private static long mulHigh(long a, long b) {
        return Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
    }

    private long nextLong() {
        state += GOLDEN_GAMMA;
        return mix64(state);
    }

    /** Uniform in [0, bound) (bound unsigned, positive), by multiply-high. */
    private long below(long bound) {
        return mulHigh(nextLong(), bound);
    }

    /** EventRng::next_price: round(exp(u * 6 ln 10) * 100). */
    private long nextPrice() {
        double unit = (double) (nextLong() >>> 11) * UNIT_SCALE;
        return Math.round(Math.exp(unit * PRICE_SCALE) * 100.0);
    }

    // ---- strings.rs ----

    /**
     * push_string: 3..maxLen random lowercase letters, each replaced by `special` with probability 1/13; with
     * a space, leading spaces are skipped and trailing ones trimmed. Writes into buf from start; returns the end.
     */
    private int pushString(long maxLen, byte special, byte[] buf, int start) {
        long len = STRING_LENGTH_MIN + below(maxLen - STRING_LENGTH_MIN);
        boolean trim = special == ' ';
        int end = start;
        long left = len;
        while (left > 0) {
            long fraction = nextLong();
            int chars = (int) Math.min(left, STRING_CHARS_PER_DRAW);
            for (int i = 0; i < chars; i++) {
                long special13 = mulHigh(fraction, 13);
                fraction *= 13;
                if (special13 == 0) {
                    if (!(trim && end == start)) {
                        buf[end++] = special;
                    }
                } else {
                    long letter = mulHigh(fraction, 26);
                    fraction *= 26;
                    buf[end++] = (byte) ('a' + letter);
                }
            }
            left -= chars;
        }
        if (trim) {
            while (end > start && buf[end - 1] == ' ') {
                end--;
            }
        }
        return end;
    }

    /** Makes push_string's draws without the string: its length, then one draw per 4 characters. */
    private void skipString(long maxLen) {
        long len = STRING_LENGTH_MIN + below(maxLen - STRING_LENGTH_MIN);
        state += GOLDEN_GAMMA * ((len + STRING_CHARS_PER_DRAW - 1) / STRING_CHARS_PER_DRAW);
    }

    /** append_extra: filler so that the event's size averages sizeAverage (±20% of the gap). */
    private byte[] extra(int sizeSoFar, int sizeAverage) {
        if (sizeSoFar > sizeAverage) {
            return EMPTY;
        }
        int gap = sizeAverage - sizeSoFar;
        int delta = (2 * gap + 5) / 10; // Java's Math.round(gap * 0.2), in integers
        int len = gap - delta + (delta == 0 ? 0 : (int) below(2L * delta));
        if (len == 0) {
            return EMPTY;
        }
        byte[] letters = new byte[len];
        int at = 0;
        while (at < len) {
            long fraction = nextLong();
            int chars = Math.min(len - at, EXACT_CHARS_PER_DRAW);
            for (int i = 0; i < chars; i++) {
                letters[at++] = (byte) ('a' + mulHigh(fraction, 26));
                fraction *= 26;
            }
        }
        return letters;
    }

    // ---- arithmetic helpers ----

    private static long divU(long a, long b) {
        return a >= 0 ? a / b : Long.divideUnsigned(a, b);
    }

    private static long remU(long a, long b) {
        return a >= 0 ? a % b : Long.remainderUnsigned(a, b);
    }

    private static long saturatingAdd(long a, long b) {
        long sum = a + b;
        if (((a ^ sum) & (b ^ sum)) < 0) {
            return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
        }
        return sum;
    }

    /** u64::saturating_add. */
    private static long saturatingAddUnsigned(long a, long b) {
        long sum = a + b;
        return Long.compareUnsigned(sum, a) < 0 ? -1L : sum;
    }

    /** i64::saturating_mul(2). */
    private static long saturatingMul2(long a) {
        if (a > Long.MAX_VALUE / 2) {
            return Long.MAX_VALUE;
        }
        if (a < Long.MIN_VALUE / 2) {
            return Long.MIN_VALUE;
        }
        return a * 2;
    }

    private static BigInteger unsigned(long value) {
        BigInteger big = BigInteger.valueOf(value & Long.MAX_VALUE);
        return value < 0 ? big.setBit(63) : big;
    }

    private static int checkTable(int table) {
        if (table < PERSON || table > BID) {
            throw new IllegalArgumentException("unknown nexmark table " + table);
        }
        return table;
    }

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[][] utf8All(String[] strings) {
        byte[][] out = new byte[strings.length][];
        for (int i = 0; i < strings.length; i++) {
            out[i] = utf8(strings[i]);
        }
        return out;
    }

    private static byte[][] names() {
        byte[][] out = new byte[FIRST_NAMES.length * LAST_NAMES.length][];
        for (int first = 0; first < FIRST_NAMES.length; first++) {
            for (int last = 0; last < LAST_NAMES.length; last++) {
                out[first * LAST_NAMES.length + last] = utf8(FIRST_NAMES[first] + " " + LAST_NAMES[last]);
            }
        }
        return out;
    }

    // ---- command line ----

    /**
     * `java NexmarkRows <table> <seed> <baseTimeMs> <eventsPerSecond> <events> <comma-separated wanted column
     * names or *>`: prints the table's rows among the first <events> global events, one per line, wanted
     * columns only, tab-separated, strings as text, timestamps as ms.
     */
    public static void main(String[] args) throws IOException {
        if (args.length != 6) {
            System.err.println(
                    "usage: java NexmarkRows <person|auction|bid> <seed> <baseTimeMs> <eventsPerSecond> <events> <columns|*>");
            System.exit(2);
        }
        int table = parseTable(args[0]);
        long seed = Long.parseUnsignedLong(args[1]);
        long baseTimeMs = Long.parseLong(args[2]);
        long eventsPerSecond = Long.parseUnsignedLong(args[3]);
        long events = Long.parseLong(args[4]);
        String[] names = COLUMNS[table];
        boolean[] wanted = new boolean[names.length];
        if (args[5].equals("*")) {
            Arrays.fill(wanted, true);
        } else {
            for (String name : args[5].split(",")) {
                int c = Arrays.asList(names).indexOf(name.trim());
                if (c < 0) {
                    System.err.println("unknown column '" + name + "' of " + TABLE_NAMES[table]
                            + "; columns: " + String.join(", ", names));
                    System.exit(2);
                }
                wanted[c] = true;
            }
        }
        NexmarkRows rows = new NexmarkRows(table, seed, baseTimeMs, eventsPerSecond, wanted);
        Object[] row = new Object[names.length];
        OutputStream out = new FileOutputStream(FileDescriptor.out);
        byte[] buf = new byte[1 << 16];
        int at = 0;
        long count = rowsIn(table, events);
        for (long index = 0; index < count; index++) {
            rows.fill(eventOf(table, index), row);
            boolean first = true;
            for (int c = 0; c < names.length; c++) {
                if (!wanted[c]) {
                    continue;
                }
                byte[] text = row[c] instanceof byte[] ? (byte[]) row[c] : utf8(row[c].toString());
                if (at + text.length + 2 > buf.length) {
                    out.write(buf, 0, at);
                    at = 0;
                }
                if (!first) {
                    buf[at++] = '\t';
                }
                first = false;
                System.arraycopy(text, 0, buf, at, text.length);
                at += text.length;
            }
            buf[at++] = '\n';
        }
        out.write(buf, 0, at);
        out.flush();
    }

    private static int parseTable(String name) {
        for (int t = 0; t < TABLE_NAMES.length; t++) {
            if (TABLE_NAMES[t].equalsIgnoreCase(name.trim()) || name.trim().equals(Integer.toString(t))) {
                return t;
            }
        }
        throw new IllegalArgumentException("unknown nexmark table '" + name + "'; valid tables are: person, auction, bid");
    }
}
