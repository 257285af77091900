-- Nexmark q5 in full (Flink's text): the auctions with the most bids in
-- each 10-second window sliding every 2 seconds. The per-window maximum is
-- an aggregate over a window aggregate's rows, grouped by their window;
-- the join on the window bounds is a windowed join.
-- At Flink Nexmark's time model the open windows hold millions of groups an
-- instance and the join millions of (auction, count) rows, above the
-- default bounds (1 M groups, 10 M join rows an instance); the bounds stay,
-- sized for it.
SET window_groups_max = 100000000;
SET join_state_rows_max = 100000000;
SELECT AuctionBids.auction, AuctionBids.num
FROM (
    SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
        FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn
