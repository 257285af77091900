-- Nexmark q1: currency conversion (dollars to euros).
SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
