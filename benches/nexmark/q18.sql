-- Nexmark q18: find the last bid of each bidder on each auction
-- (deduplication), as Flink writes it (only the dialect adapted:
-- date_time). ROW_NUMBER() ... <= 1 is a top-1 per (bidder, auction): a
-- changelog, whose row per pair is replaced when a later bid comes. Bids
-- with the same date_time: the one that arrived first stays.
-- Its partitions are (bidder, auction) pairs: millions over the
-- benchmark's 10 M events, past the default bound of 1 M an instance.
SET aggregate_groups_max = 100000000;
SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
    FROM bid
) AS b
WHERE rank_number <= 1
