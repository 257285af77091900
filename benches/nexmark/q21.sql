-- Nexmark q21: add a channel_id column to bids — the channel's number for
-- four known channels, else the channel_id parameter of the bid's URL — and
-- keep the bids that have one, as Flink writes it (only the dialect
-- adapted).
SELECT auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
    END AS channel_id
FROM bid
WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
    OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')
