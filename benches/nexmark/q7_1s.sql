-- Nexmark q7 with 1-second windows: the latency benchmark's q7 (with
-- wall-clock event time a 10-second window gives too few results in a
-- minute for a p99; 1-second windows give 60).
SET join_state_rows_max = 100000000;
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND)
    GROUP BY window_start, window_end
) AS B1 ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '1' SECOND AND B1.date_time
