-- Nexmark q5 (hot items), its sliding-window part: bids per auction over
-- 10-second windows every 2 seconds. (The full q5, which then keeps each
-- window's top auctions, is q5_full.sql; this part is what the benchmark
-- figures measured.)
-- At Flink Nexmark's time model (10 M events a second of event time) the
-- windows' 2-s panes hold millions of (auction, pane) groups an instance,
-- above the default bound of 1 M; the bound stays, sized for it.
SET window_groups_max = 100000000;
SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end
