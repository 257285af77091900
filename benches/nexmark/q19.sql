-- Nexmark q19: the ten highest bids of each auction (top-N), as Flink
-- writes it (only the dialect adapted). A changelog: a new bid entering an
-- auction's top ten moves the ones below it down a rank (-U/+U per rank).
-- Its partitions are auctions: past the default bound of 1 M an instance
-- in a minute at 1 M events a second (the checkpoint benchmark).
SET aggregate_groups_max = 100000000;
SELECT *
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
    FROM bid
) AS b
WHERE rank_number <= 10
