-- Gaps between work on each rank's timelines (device streams; host threads for ranks without
-- device events), grouped by the cause: what bound the start of the event after the gap
-- (host: CPU ops or launches, launch, sync, collective: other ranks, resource: busy engine/link,
-- none: nothing recorded, e.g. data loading). Gaps between steps are not counted. Times in us.
WITH dev_ranks AS (SELECT DISTINCT rank FROM events WHERE is_device),
work AS (
    SELECT rank, track, step, event_id, start_us, end_us, bound_by
    FROM events
    WHERE ph = 'X' AND kind NOT IN ('annotation', 'instant')
      AND (is_device OR rank NOT IN (SELECT rank FROM dev_ranks))
),
gaps AS (
    SELECT rank, bound_by,
        start_us - max(end_us) OVER (
            PARTITION BY rank, track, step ORDER BY start_us, end_us, event_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS gap_us
    FROM work
)
SELECT
    rank,
    bound_by                                                   AS cause,
    count(*)                                                   AS gaps,
    sum(gap_us)                                                AS idle_us,
    max(gap_us)                                                AS max_gap_us,
    100 * sum(gap_us) / sum(sum(gap_us)) OVER (PARTITION BY rank) AS pct_of_rank_idle
FROM gaps
WHERE gap_us > 0
GROUP BY rank, bound_by
ORDER BY rank, idle_us DESC, cause;
