-- Ops grouped by name: busy time (own time of all instances) and critical time (own time on
-- the critical path), in microseconds. An op's own time is its run minus its children's (its
-- self time; a leaf's whole run), so nested ops are not counted twice. Keeps the top 25 by
-- critical time and the top 25 by busy time; critical_place / busy_place: the op's place in the
-- list by critical / busy time (1 = most).
WITH children AS (
    SELECT parent_id, sum(end_us - start_us) AS child_us
    FROM events
    WHERE ph = 'X' AND parent_id >= 0
    GROUP BY parent_id
),
ev AS (
    SELECT e.name, e.kind, e.is_device,
        greatest(e.end_us - e.start_us - coalesce(c.child_us, 0), 0) AS dur_us,
        e.critical_us
    FROM events AS e
    LEFT JOIN children AS c ON c.parent_id = e.event_id
    WHERE e.ph = 'X' AND e.kind NOT IN ('annotation', 'instant')
),
ops AS (
    SELECT
        name,
        kind,
        CASE WHEN is_device THEN 'device' ELSE 'host' END            AS side,
        count(*)                                                       AS count,
        sum(dur_us)                                                    AS busy_us,
        coalesce(sum(critical_us), 0)                                  AS critical_us,
        avg(dur_us)                                                    AS mean_us
    FROM ev
    GROUP BY name, kind, is_device
),
ranked AS (
    SELECT *,
        100 * critical_us / nullif(sum(critical_us) OVER (), 0)         AS critical_pct, -- of all critical op time
        100 * busy_us / nullif(sum(busy_us) OVER (), 0)               AS busy_pct,    -- of all busy op time
        row_number() OVER (ORDER BY critical_us DESC, busy_us DESC, name, kind, side) AS critical_place,
        row_number() OVER (ORDER BY busy_us DESC, critical_us DESC, name, kind, side) AS busy_place
    FROM ops
)
SELECT name, kind, side, count, critical_us, critical_pct, busy_us, busy_pct, mean_us,
       critical_place, busy_place
FROM ranked
WHERE critical_place <= 25 OR busy_place <= 25
ORDER BY critical_place;
