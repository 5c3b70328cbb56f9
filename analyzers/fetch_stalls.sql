-- Embedding lookups and memory copies / DMA, by op name. critical_us: time of instances on the
-- critical path; fetch_us: their memory-bound time; bytes: read + written (B); achieved_gbps:
-- bytes over run time in GB/s (1 B/us = 1e-3 GB/s), null when the trace gave no sizes.
SELECT
    kind,
    name,
    count(*)                                                       AS events,
    count(*) FILTER (WHERE critical)                               AS critical_events,
    coalesce(sum(end_us - start_us) FILTER (WHERE critical), 0)    AS critical_us,
    coalesce(sum(fetch_us) FILTER (WHERE critical), 0)             AS critical_fetch_us,
    sum(fetch_us)                                                  AS fetch_us,
    sum(end_us - start_us)                                         AS busy_us,
    sum(bytes_read + bytes_written)                                AS bytes,
    nullif(sum(bytes_read + bytes_written), 0) / nullif(sum(end_us - start_us), 0) / 1e3
                                                                   AS achieved_gbps  -- null: bytes unknown
FROM events
WHERE ph = 'X' AND kind IN ('embedding', 'memcpy', 'memset') AND (is_device OR fetch_us > 0)
GROUP BY kind, name
ORDER BY critical_us DESC, fetch_us DESC, kind, name
LIMIT 50;
