-- Nexmark q17: auction statistics report. Per auction and day: bids in
-- three price ranks, and the minimum, maximum, average and sum of the
-- prices, as Flink writes it (only the dialect adapted; avg is a double
-- here, Flink's avg of a BIGINT is a BIGINT). A changelog, as q15.
-- A group per auction and day: at the benchmark's time model 100 M events
-- bid on ~6 M auctions, 3 M an instance at parallelism 2, past the default
-- bound of 1 M groups an instance.
SET aggregate_groups_max = 10000000;
SELECT
    auction,
    DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day,
    count(*) AS total_bids,
    count(*) FILTER (WHERE price < 10000) AS rank1_bids,
    count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
    count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
    min(price) AS min_price,
    max(price) AS max_price,
    avg(price) AS avg_price,
    sum(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd')
