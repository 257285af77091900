-- Nexmark q0: pass-through. Measures the source, one projection and the sink.
SELECT auction, bidder, price, date_time, extra FROM bid
