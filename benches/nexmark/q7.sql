-- Nexmark q7: highest bid. The maximum price of each 10-second tumbling
-- window, joined back to the bids of that window with that price. The
-- BETWEEN bounds each side's event time by the other's, so this is an
-- interval join: a bid is freed once the watermark is 10 s past it.
-- With wall-clock event time at the latency run's rate (half the measured
-- rate: ~9.4 M bids/s on the 2-core machine of the README) the join holds
-- 10 s of bids, ~47 M rows per instance (32 bytes of columns each, ~2 GB),
-- above the default bound of 10 M; the bound stays, sized for that rate.
SET join_state_rows_max = 100000000;
SELECT B.auction, B.price, B.bidder, B.date_time
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) AS B1 ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
