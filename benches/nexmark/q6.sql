-- Nexmark q6: the average selling price per seller over their last 10
-- closed auctions: each auction's winning bid (its highest between its
-- start and its expiry), averaged with the seller's 10 winners before it,
-- in the order of the winning bids' times. As Flink writes it — which
-- Flink cannot run ("the OVER WINDOW operator doesn't support to consume
-- retractions") — with only the dialect adapted: date_time, the inner
-- columns named as the inner query names them (Flink's text names A and B
-- outside their scope), and the earliest of equal winning prices wins, as
-- in q9. A regular join (kept until join_state_rows_max), a top-1 per
-- auction (a changelog), an OVER aggregate over that changelog.
SELECT q.seller,
    avg(q.price) OVER (PARTITION BY q.seller ORDER BY q.date_time ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY id, seller ORDER BY price DESC, date_time ASC) AS rownum
    FROM (
        SELECT a.id, a.seller, b.price, b.date_time
        FROM auction AS a, bid AS b
        WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    ) AS j
) AS q
WHERE q.rownum <= 1
