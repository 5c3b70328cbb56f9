-- Per-rank collective time per step, mean over each rank's steps, from the rank_collectives
-- view (mtia_trace/derived_views.py defines the per rank-step quantities). busy_us: the rank's
-- own collective time (transfer + retry + post); critical_us: the part on the critical path
-- (exposed); queue_us / peer_wait_us: waits before its collectives started (not in busy_us).
-- *_pct_of_step: share of the rank's mean step time, percent. Times in us per rank-step.
-- times_last: collectives of the run (all steps) where this rank arrived last, holding up the
-- others by more than float noise (the stragglers analyzer lists them).
SELECT
    rank,
    count(*)                                            AS steps,
    avg(collectives)                                    AS collectives,   -- instances per step
    avg(bytes)                                          AS bytes,         -- contributed per step
    avg(transfer_us)                                    AS transfer_us,
    avg(retry_us)                                       AS retry_us,
    avg(post_us)                                        AS post_us,
    avg(busy_us)                                        AS busy_us,
    avg(critical_us)                                    AS critical_us,
    avg(queue_us)                                       AS queue_us,
    avg(peer_wait_us)                                   AS peer_wait_us,
    avg(step_us)                                        AS step_us,
    100 * avg(busy_us) / nullif(avg(step_us), 0)        AS busy_pct_of_step,
    100 * avg(critical_us) / nullif(avg(step_us), 0)    AS critical_pct_of_step,
    coalesce(any_value(l.times_last), 0)                AS times_last
FROM rank_collectives
LEFT JOIN (SELECT late_rank AS rank, count(*) AS times_last FROM collectives
           WHERE ranks > 1 AND skew_us > 1e-3 GROUP BY late_rank) AS l USING (rank)
GROUP BY rank
ORDER BY rank;
