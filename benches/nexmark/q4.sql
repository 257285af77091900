-- Nexmark q4: the average closing price per category. A bid counts for an
-- auction when it comes between the auction's start and its expiry; an
-- auction's closing price is its highest such bid. As Flink writes it
-- (only the dialect adapted: date_time). The per-auction maximum is an
-- aggregate without a window (a changelog); the average per category runs
-- over that changelog, taking back each auction's previous maximum when it
-- rises. The join keeps its rows until join_state_rows_max (a regular join).
SELECT q.category, avg(q.final) AS avg_final
FROM (
    SELECT max(b.price) AS final, a.category
    FROM auction AS a, bid AS b
    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) AS q
GROUP BY q.category
