"""Views derived from a run's tables: defined once here, created beside the table views.

``rank_collectives``: per rank and step, the time the rank spent in its own collectives (the
per-rank collective time: transfer + retransmission + post) with, beside it, the part of it on
the step's critical path and the time its collectives waited before starting. It is the
quantity to compare between targets: a sum over collective instances (the ``collectives``
table) adds up collectives that run at the same time on disjoint rank groups.
"""

from __future__ import annotations

from mtia_trace.schema import F64, I32, I64, STR, Column

RANK_COLLECTIVE_COLUMNS: tuple[Column, ...] = (
    Column("rank", I32, "", "rank"),
    Column("step", I32, "", "step"),
    Column("collectives", I64, "", "collective / p2p instances the rank took part in"),
    Column("bytes", F64, "B", "bytes the rank contributed, summed over its instances"),
    Column("transfer_us", F64, "us", "time moving the rank's collective data (collective + fetch cost components)"),
    Column("retry_us", F64, "us", "retransmission time after packet loss"),
    Column("post_us", F64, "us", "host-side time of posting the collectives (launch, doorbell, proxy: the host_us component)"),
    Column("busy_us", F64, "us", "per-rank collective time: transfer_us + retry_us + post_us (the instances' run time)"),
    Column("queue_us", F64, "us", "time the rank's ready collectives waited for busy engines / links (not in busy_us)"),
    Column("peer_wait_us", F64, "us", "time the rank's ready collectives waited for their last peer (not in busy_us)"),
    Column("critical_us", F64, "us", "collective time on the step's critical path: the steps table's collective_us + retry_us (exposed)"),
    Column("step_us", F64, "us", "the rank's replayed step wall time (steps.total_us)"),
)

RANK_COLLECTIVE_OP_COLUMNS: tuple[Column, ...] = (
    Column("rank", I32, "", "rank"),
    Column("step", I32, "", "step"),
    Column("coll_op", STR, "", "collective operation (the kind for unnamed collectives / p2p)"),
    Column("group_size", I32, "", "ranks in the collective's process group, 0 if unknown"),
    *RANK_COLLECTIVE_COLUMNS[2:10],
)

#: Device collectives where the rank has device events, its host collective ops otherwise
#: (CPU-only traces), per rank, step and operation; only (rank, step)s of the steps table.
RANK_COLLECTIVE_OPS_SQL = """CREATE OR REPLACE VIEW rank_collective_ops AS
  WITH device_ranks AS (SELECT DISTINCT run, rank FROM events WHERE is_device)
  SELECT e.run, e.rank, e.step, coalesce(e.coll_op, e.kind) AS coll_op, e.group_size,
    count(*) AS collectives, sum(e.coll_bytes_in) AS bytes,
    sum(e.collective_us + e.fetch_us) AS transfer_us, sum(e.retry_us) AS retry_us,
    sum(e.host_us) AS post_us,
    sum(e.collective_us + e.fetch_us + e.retry_us + e.host_us) AS busy_us,
    sum(e.queue_us) AS queue_us, sum(e.peer_wait_us) AS peer_wait_us
  FROM events AS e
  LEFT JOIN device_ranks AS d ON d.run = e.run AND d.rank = e.rank
  SEMI JOIN steps AS s ON s.run = e.run AND s.rank = e.rank AND s.step = e.step
  WHERE e.ph = 'X' AND e.kind IN ('collective', 'p2p') AND (e.is_device OR d.rank IS NULL)
  GROUP BY e.run, e.rank, e.step, coalesce(e.coll_op, e.kind), e.group_size;"""

#: Every (rank, step) of the steps table, zero when it ran no collective.
RANK_COLLECTIVES_SQL = """CREATE OR REPLACE VIEW rank_collectives AS
  WITH own AS (
    SELECT run, rank, step, sum(collectives) AS collectives, sum(bytes) AS bytes,
      sum(transfer_us) AS transfer_us, sum(retry_us) AS retry_us, sum(post_us) AS post_us,
      sum(busy_us) AS busy_us, sum(queue_us) AS queue_us, sum(peer_wait_us) AS peer_wait_us
    FROM rank_collective_ops GROUP BY run, rank, step)
  SELECT s.run, s.rank, s.step, coalesce(o.collectives, 0) AS collectives,
    coalesce(o.bytes, 0.0) AS bytes, coalesce(o.transfer_us, 0.0) AS transfer_us,
    coalesce(o.retry_us, 0.0) AS retry_us, coalesce(o.post_us, 0.0) AS post_us,
    coalesce(o.busy_us, 0.0) AS busy_us,
    coalesce(o.queue_us, 0.0) AS queue_us, coalesce(o.peer_wait_us, 0.0) AS peer_wait_us,
    s.collective_us + s.retry_us AS critical_us, s.total_us AS step_us
  FROM steps AS s LEFT JOIN own AS o ON o.run = s.run AND o.rank = s.rank AND o.step = s.step;"""

#: name -> (one-line description, columns, CREATE VIEW statement), in creation order.
DERIVED_VIEWS: dict[str, tuple[str, tuple[Column, ...], str]] = {
    "rank_collective_ops": (
        "Per rank, step and collective operation: the rank's own time in that operation "
        "(`busy_us` = transfer + retry + post) and the waits before it started; the same "
        "columns as `rank_collectives`, which sums it over operations.",
        RANK_COLLECTIVE_OP_COLUMNS, RANK_COLLECTIVE_OPS_SQL),
    "rank_collectives": (
        "Per rank and step: the rank's own collective time (`busy_us` = transfer + retry + "
        "post) and, beside it, the part on the critical path (`critical_us`, exposed) and the "
        "waits before its collectives started.", RANK_COLLECTIVE_COLUMNS, RANK_COLLECTIVES_SQL),
}


def derived_views_sql() -> str:
    """The ``CREATE VIEW`` statements of every derived view (after the table views)."""
    return "\n".join(sql for _, _, sql in DERIVED_VIEWS.values()) + "\n"
