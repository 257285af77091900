-- Nexmark q8: monitor new users. People who opened an account and created
-- an auction in the same 10-second tumbling window: a windowed join of two
-- window aggregates; its state is freed when the window closes.
-- At Flink Nexmark's time model a 10-second window holds ~2 M persons and
-- ~6 M auctions, above the default bound of 1 M groups an instance; the
-- bound stays, sized for it.
SET window_groups_max = 100000000;
SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) AS P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) AS A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
