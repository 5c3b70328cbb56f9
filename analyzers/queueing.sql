-- Events that waited for a busy resource (message engines, links), grouped by rank, step,
-- timeline and operation. queue_us: total wait between ready and start; first/last_queued_at_us:
-- when the waiting started, relative to the rank's step start. Times in us.
WITH ev AS (
    SELECT rank, step, track, coalesce(coll_op, kind) AS op, queue_us, start_us, end_us
    FROM events
    WHERE ph = 'X'
),
hot AS (  -- only groups where something queued: most of the table is skipped early
    SELECT DISTINCT rank, step, track, op FROM ev WHERE queue_us > 0
),
q AS (
    SELECT rank, step, track, op,
        count(*)                                                  AS events,
        count(*) FILTER (WHERE queue_us > 0)                      AS queued,
        sum(queue_us)                                             AS queue_us,
        max(queue_us)                                             AS max_queue_us,
        100 * sum(queue_us) / nullif(sum(queue_us + end_us - start_us), 0) AS queue_pct, -- of wait + run
        min(start_us - queue_us) FILTER (WHERE queue_us > 0)     AS first_queued_us,
        max(start_us - queue_us) FILTER (WHERE queue_us > 0)     AS last_queued_us
    FROM ev SEMI JOIN hot USING (rank, step, track, op)
    GROUP BY rank, step, track, op
)
SELECT q.rank, q.step, q.track, q.op, q.events, q.queued, q.queue_us, q.max_queue_us,
    q.queue_pct,
    q.first_queued_us - coalesce(s.start_us, 0)                  AS first_queued_at_us,
    q.last_queued_us - coalesce(s.start_us, 0)                   AS last_queued_at_us
FROM q
LEFT JOIN steps AS s ON s.rank = q.rank AND s.step = q.step
ORDER BY q.queue_us DESC, q.rank, q.step, q.track, q.op
LIMIT 100;
