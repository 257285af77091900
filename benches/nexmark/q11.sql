-- Nexmark q11: user sessions. How many bids each bidder makes in a
-- session: a bidder's bids no more than 10 s apart, in Flink's window TVF
-- form (the session partitioned by the bidder).
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end
