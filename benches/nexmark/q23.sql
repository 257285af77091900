-- Nexmark q23 (Flink's, not in the original suite): every bid by a person
-- who has also listed an item for auction, with the person and each of
-- their auctions: a multi-way join. Flink's text, the columns named as
-- Sluice's generator names them. Two regular joins (no window, no TTL):
-- their state is bounded by join_state_rows_max alone.
SELECT bidder, price, channel, url, B.extra AS bid_extra,
       P.id AS person_id, name, email_address, credit_card, city, state, P.extra AS person_extra,
       item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, expires, seller, category,
       A.extra AS auction_extra
FROM bid AS B
    JOIN person AS P ON P.id = B.bidder
    JOIN auction AS A ON A.seller = B.bidder
