-- Nexmark q2: selection of a few auctions.
SELECT auction, price FROM bid WHERE auction % 123 = 0
