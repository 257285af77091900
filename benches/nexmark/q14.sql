-- Nexmark q14: bid prices converted, bid times typed by the hour (Flink's
-- text, the dialect adapted: date_time, and Nexmark's Java UDF
-- count_char(extra, 'c') written in SQL as the length lost by removing
-- every 'c'). Stateless: a filter and a projection of every bid.
SELECT auction, bidder, 0.908 * price AS price,
    CASE
        WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime'
        WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bid_time_type,
    date_time, extra,
    length(extra) - length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
