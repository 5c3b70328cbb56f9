-- Attribution per step, averaged over ranks. Every *_us column is microseconds; the components
-- (compute .. idle) are critical-path time and sum to total_us; *_pct is the component's share
-- of total_us in percent. collective_us is transfer only; peer_wait_us is waiting for peers.
SELECT
    step,
    count(*)                           AS ranks,          -- ranks that ran the step
    avg(total_us)                      AS total_us,       -- replayed step wall time
    avg(measured_us)                   AS measured_us,    -- measured step wall time
    max(total_us)                      AS max_total_us,   -- slowest rank's step time
    avg(compute_us)                    AS compute_us,
    avg(fetch_us)                      AS fetch_us,
    avg(collective_us)                 AS collective_us,
    avg(peer_wait_us)                  AS peer_wait_us,
    avg(queue_us)                      AS queue_us,
    avg(retry_us)                      AS retry_us,
    avg(host_us)                       AS host_us,
    avg(idle_us)                       AS idle_us,
    100 * avg(compute_us)    / nullif(avg(total_us), 0) AS compute_pct,
    100 * avg(fetch_us)      / nullif(avg(total_us), 0) AS fetch_pct,
    100 * avg(collective_us) / nullif(avg(total_us), 0) AS collective_pct,
    100 * avg(peer_wait_us)  / nullif(avg(total_us), 0) AS peer_wait_pct,
    100 * avg(queue_us)      / nullif(avg(total_us), 0) AS queue_pct,
    100 * avg(retry_us)      / nullif(avg(total_us), 0) AS retry_pct,
    100 * avg(host_us)       / nullif(avg(total_us), 0) AS host_pct,
    100 * avg(idle_us)       / nullif(avg(total_us), 0) AS idle_pct
FROM steps
GROUP BY step
ORDER BY step;
