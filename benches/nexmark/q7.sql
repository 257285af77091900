-- Nexmark q7: highest bid (Flink's text). The maximum price of each
-- 10-second tumbling window, joined back to the bids of that window with
-- that price. The BETWEEN bounds each side's event time by the other's, so
-- this is an interval join: a bid is freed once the watermark is 10 s past
-- it. At Flink Nexmark's time model (10 M events a second of event time)
-- the join holds 10 s of bids, ~92 M rows (100 bytes of columns each with
-- `extra`), ~46 M per instance at parallelism 2: above the default bound
-- of 10 M rows an instance; the bound stays, sized for it.
SET join_state_rows_max = 100000000;
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) AS B1 ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
