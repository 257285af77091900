-- Nexmark q9: the winning bid of each auction — its highest bid between
-- its start and its expiry (the earliest of equal ones), as Flink writes
-- it (only the dialect adapted: date_time, and the bid's columns renamed
-- the same way). A regular join (kept until join_state_rows_max) then a
-- top-1 per auction: a changelog.
SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra,
    auction, bidder, price, bid_date_time, bid_extra
FROM (
    SELECT a.*, b.auction, b.bidder, b.price, b.date_time AS bid_date_time, b.extra AS bid_extra,
        ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.date_time ASC) AS rownum
    FROM auction AS a, bid AS b
    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
) AS w
WHERE rownum <= 1
