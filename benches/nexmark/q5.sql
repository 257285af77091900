-- Nexmark q5 (hot items), its sliding-window part: bids per auction over
-- 10-second windows every 2 seconds. (The full q5 then keeps each window's
-- maximum; Sluice cannot yet aggregate the rows of a window aggregate again.)
SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end
