-- Each rank's critical path per step, in time order: the innermost critical events (a critical
-- event that encloses another critical event is left out), with consecutive events of the same
-- op collapsed into one row. at_us: start relative to the rank's step start; busy_us: summed
-- run time of the collapsed events; bound_by: what the first of them waited for. Times in us.
WITH crit AS (
    SELECT rank, step, event_id, name, kind, start_us, end_us, bound_by
    FROM events
    WHERE critical AND ph = 'X' AND kind <> 'annotation'
      AND NOT EXISTS (SELECT 1 FROM events AS inner_ev
                      WHERE inner_ev.critical AND inner_ev.parent_id = events.event_id)
),
cp AS (
    SELECT *,
        row_number() OVER (PARTITION BY rank, step ORDER BY start_us, end_us, event_id)
        - row_number() OVER (PARTITION BY rank, step, name ORDER BY start_us, end_us, event_id)
            AS island
    FROM crit
),
collapsed AS (
    SELECT rank, step, name, island,
        any_value(kind)                                   AS kind,
        count(*)                                          AS events,
        min(start_us)                                     AS start_us,
        max(end_us)                                       AS end_us,
        sum(end_us - start_us)                            AS busy_us,
        arg_min(bound_by, start_us)                       AS bound_by
    FROM cp
    GROUP BY rank, step, name, island
)
SELECT c.step, c.rank,
    row_number() OVER (PARTITION BY c.rank, c.step ORDER BY c.start_us, c.end_us, c.name) AS seq,
    c.name, c.kind, c.events,
    c.start_us - coalesce(s.start_us, 0)                  AS at_us,
    c.end_us - c.start_us                                 AS span_us,
    c.busy_us, c.bound_by
FROM collapsed AS c
LEFT JOIN steps AS s ON s.rank = c.rank AND s.step = c.step
ORDER BY c.step, c.rank, seq;
