-- Clickstream from Kafka, windowed counts to HDFS as Parquet.
--
-- Needs Kafka on localhost:9092 and HDFS on hdfs://localhost:9000
-- (`scripts/services.sh start all`) and a running Sluice
-- (`scripts/playground.sh`); see README.md next to this file.
--
-- Each record of the `clicks` topic is a JSON object like
--   {"uid": "u3", "url": "/cart", "ts": "2026-11-30 12:00:01.250"}

CREATE STREAM IF NOT EXISTS clicks (
    uid TEXT,
    url TEXT NOT NULL,
    ts  TIMESTAMP NOT NULL,
    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
    connector = 'kafka',
    topic = 'clicks',
    'properties.bootstrap.servers' = 'localhost:9092',
    format = 'json',
    'scan.startup.mode' = 'earliest',
    'format.error.policy' = 'dead_letter',
    'dead_letter.topic' = 'clicks_rejected'
);

-- Clicks per page and minute, one directory per window, files visible only
-- when complete.
CREATE SINK IF NOT EXISTS clicks_per_minute WITH (
    connector = 'hdfs',
    url = 'hdfs://localhost:9000',
    path = '/sluice/examples/clicks_per_minute',
    format = 'parquet',
    'partition.by' = 'window_start',
    'rollover.interval' = '10s'
) AS
SELECT window_start, window_end, url, count(*) AS clicks, count(DISTINCT uid) AS users
FROM TUMBLE(clicks, ts, INTERVAL '1' MINUTE)
GROUP BY window_start, window_end, url;

-- The busiest pages, back to Kafka, keyed by page.
CREATE SINK IF NOT EXISTS hot_pages WITH (
    connector = 'kafka',
    topic = 'hot_pages',
    'properties.bootstrap.servers' = 'localhost:9092',
    format = 'json',
    key = 'url',
    'key.format' = 'raw',
    'timestamp.column' = 'window_end'
) AS
SELECT window_start, window_end, url, count(*) AS clicks
FROM TUMBLE(clicks, ts, INTERVAL '1' MINUTE)
GROUP BY window_start, window_end, url
HAVING count(*) >= 100;
