-- Events on each step's critical path in time order; consecutive events of the same op on the
-- same rank are collapsed into one row. start/end in trace-clock us; busy_us sums their run time.
WITH cp AS (
    SELECT rank, step, event_id, name, kind, start_us, end_us, bound_by,
        row_number() OVER (PARTITION BY step ORDER BY start_us, end_us, rank, event_id)
        - row_number() OVER (PARTITION BY step, rank, name ORDER BY start_us, end_us, rank, event_id)
            AS island
    FROM events
    WHERE critical AND ph = 'X' AND kind <> 'annotation'
),
runs AS (
    SELECT step, rank, name, island,
        any_value(kind)                                   AS kind,
        count(*)                                          AS events,
        min(start_us)                                     AS start_us,
        max(end_us)                                       AS end_us,
        sum(end_us - start_us)                            AS busy_us,
        arg_min(bound_by, start_us)                       AS bound_by   -- what the first one waited for
    FROM cp
    GROUP BY step, rank, name, island
)
SELECT step,
    row_number() OVER (PARTITION BY step ORDER BY start_us, end_us, rank, name) AS seq,
    rank, name, kind, events, start_us, end_us, busy_us, bound_by
FROM runs
ORDER BY step, seq;
