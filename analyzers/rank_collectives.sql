-- Per-rank collective time per step, mean over each rank's steps, from the rank_collectives
-- view (mtia_trace/derived_views.py defines the per rank-step quantities). busy_us: the rank's
-- own collective time (transfer + retry + post); critical_us: the part on the critical path
-- (exposed); queue_us / peer_wait_us: waits before its collectives started (not in busy_us).
-- *_pct_of_step: share of the rank's mean step time, percent. Times in us per rank-step.
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
    100 * avg(critical_us) / nullif(avg(step_us), 0)    AS critical_pct_of_step
FROM rank_collectives
GROUP BY rank
ORDER BY rank;
