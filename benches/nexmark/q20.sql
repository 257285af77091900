-- Nexmark q20: expand bid with auction (Flink's text, its columns named as
-- Sluice's generator names them). A regular join: no window, no interval,
-- no TTL; its state is bounded by join_state_rows_max alone.
SELECT auction, bidder, price, channel, url, B.date_time, B.extra,
       item_name, description, initial_bid, reserve, A.date_time, expires, seller, category, A.extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10
