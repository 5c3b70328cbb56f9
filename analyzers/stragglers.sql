-- Collective instances whose ranks arrived at different times, largest lead first.
-- lead_us: how long after the first rank the last (late) rank arrived; every other rank of the
-- group waited up to that long. first/last_arrival_at_us: arrivals relative to the step's start
-- (earliest rank). How often each rank arrived last: rank_collectives.times_last.
WITH step_span AS (
    SELECT step, min(start_us) AS start_us, avg(total_us) AS step_us FROM steps GROUP BY step
)
SELECT
    c.step,
    c.pg,
    c.coll_op,
    c.coll_seq,
    c.ranks,
    c.late_rank,
    c.skew_us                                               AS lead_us,
    100 * c.skew_us / nullif(s.step_us, 0)                  AS lead_pct_of_step,
    c.bytes,
    c.first_arrival_us - coalesce(s.start_us, 0)            AS first_arrival_at_us,
    c.last_arrival_us - coalesce(s.start_us, 0)             AS last_arrival_at_us
FROM collectives AS c
LEFT JOIN step_span AS s USING (step)
WHERE c.ranks > 1 AND c.skew_us > 1e-3  -- ignore sub-nanosecond float noise
ORDER BY lead_us DESC, c.pg, c.coll_seq
LIMIT 50;
