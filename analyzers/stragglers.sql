-- Collective instances whose ranks arrived at different times, largest lead first.
-- lead_us: how long after the first rank the last (late) rank arrived; every other rank of the
-- group waited up to that long. times_late: collectives in this run where late_rank was last.
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
    c.first_arrival_us,
    c.last_arrival_us,
    count(*) OVER (PARTITION BY c.late_rank)                AS times_late
FROM collectives AS c
LEFT JOIN (SELECT step, avg(total_us) AS step_us FROM steps GROUP BY step) AS s USING (step)
WHERE c.ranks > 1 AND c.skew_us > 0
ORDER BY lead_us DESC, c.pg, c.coll_seq
LIMIT 50;
