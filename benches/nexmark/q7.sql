-- Nexmark q7: highest bid. The maximum price of each 10-second tumbling
-- window, joined back to the bids of that window with that price (an
-- unwindowed join on price whose state lives 20 s of event time).
-- The join keeps 20 s of bids: with wall-clock event time at the latency
-- run's rate (~1.6 M bids/s) that is ~16 M rows per instance, above the
-- default bound of 10 M.
SET join_state_ttl = '20s';
SET join_state_rows_max = 40000000;
SELECT B.auction, B.price, B.bidder, B.date_time
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) AS B1 ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
