-- Per-rank collective time per operation and group size, per rank-step: each column sums the
-- rank_collective_ops view (mtia_trace/derived_views.py) over ranks and steps and divides by the
-- run's rank-steps, so the busy_us of all rows add up to rank_collectives' mean busy_us (a
-- rank outside an operation's groups counts as zero). busy_us: own time (transfer + retry +
-- post); queue_us / peer_wait_us: waits before starting (not in busy_us). bytes: mean per
-- instance. Times in us per rank-step.
WITH n AS (SELECT count(*) AS rank_steps FROM steps)
SELECT
    o.coll_op,
    o.group_size                                     AS ranks,
    sum(o.collectives) / any_value(n.rank_steps)     AS collectives,  -- instances per rank-step
    sum(o.bytes) / nullif(sum(o.collectives), 0)     AS bytes,
    sum(o.transfer_us) / any_value(n.rank_steps)     AS transfer_us,
    sum(o.retry_us) / any_value(n.rank_steps)        AS retry_us,
    sum(o.post_us) / any_value(n.rank_steps)         AS post_us,
    sum(o.busy_us) / any_value(n.rank_steps)         AS busy_us,
    sum(o.queue_us) / any_value(n.rank_steps)        AS queue_us,
    sum(o.peer_wait_us) / any_value(n.rank_steps)    AS peer_wait_us
FROM rank_collective_ops AS o, n
GROUP BY o.coll_op, o.group_size
ORDER BY busy_us DESC, o.coll_op, o.group_size;
