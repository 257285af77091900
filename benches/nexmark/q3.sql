-- Nexmark q3: local item suggestion. An unwindowed stream-stream inner join,
-- its state bounded by a time-to-live on event time.
SET join_state_ttl = '1h';
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
