-- Nexmark q19: the ten highest bids of each auction (top-N), as Flink
-- writes it (only the dialect adapted). A changelog: a new bid entering an
-- auction's top ten moves the ones below it down a rank (-U/+U per rank).
SELECT *
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
    FROM bid
) AS b
WHERE rank_number <= 10
