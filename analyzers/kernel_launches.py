"""Kernel launch statistics per rank and launch call: CPU launch time vs GPU kernel time, launch
delay and outliers (HTA's ``get_cuda_kernel_launch_stats``).

Every device work event (not sync markers) linked to the host runtime call that launched it
(``events.launch_id``) is one launch: ``cpu_us`` is the launch call's duration, ``gpu_us`` the device event's, ``delay_us``
``max(kernel start - launch end, 0)`` (HTA's launch delay) and ``start_delay_us`` kernel start -
launch start. Outliers use HTA's default cutoffs. The analyzer reads the replayed clock;
`launch_pairs(con, measured=True)` gives the same pairs on the trace's own clock.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from mtia_trace.runs import to_arrow
from mtia_trace.schema import DEVICE_KINDS

NAME = "kernel_launches"
DESCRIPTION = ("Kernel launch statistics per rank and launch call: CPU launch vs GPU kernel "
               "time, launch delay and outliers (HTA's launch stats).")

#: HTA's defaults for ``get_cuda_kernel_launch_stats`` (runtime_cutoff, launch_delay_cutoff), us:
#: https://hta.readthedocs.io/en/latest/source/features/cuda_kernel_launch_stats.html
CPU_OUTLIER_US = 50.0
DELAY_OUTLIER_US = 100.0


_WORK = ", ".join(f"'{k}'" for k in sorted(DEVICE_KINDS))


def _pairs_sql(measured: bool, times: bool = False) -> str:
    def clock(t: str) -> tuple[str, str]:
        return (f"{t}.ts_us", f"{t}.ts_us + {t}.dur_us") if measured else (f"{t}.start_us",
                                                                           f"{t}.end_us")

    (ls, le), (ds, de) = clock("l"), clock("d")
    return f"""
        SELECT d.rank, l.name AS launch, d.name AS kernel, d.kind, d.track AS stream,
            d.correlation,
            {le} - {ls} AS cpu_us, {de} - {ds} AS gpu_us,
            greatest({ds} - ({le}), 0) AS delay_us, {ds} - {ls} AS start_delay_us
            {f", {ls} AS launch_start_us, {ds} AS start_us, {de} AS end_us" if times else ""}
        FROM events AS d
        JOIN events AS l ON l.run = d.run AND l.event_id = d.launch_id
        WHERE d.is_device AND d.ph = 'X' AND d.launch_id >= 0 AND d.kind IN ({_WORK})
        ORDER BY d.rank, {ds}, d.event_id"""


def launch_pairs(con: duckdb.DuckDBPyConnection, *, measured: bool = False) -> pa.Table:
    """One row per launched device event: rank, launch (runtime call name), kernel, kind,
    stream, correlation, cpu_us, gpu_us, delay_us, start_delay_us; ``measured`` reads the trace's clock
    (``ts_us``, ``dur_us``) instead of the replay's."""
    return to_arrow(con.sql(_pairs_sql(measured)))


def launch_pairs_with_times(con: duckdb.DuckDBPyConnection, *, measured: bool = False,
                            columns: str | None = None) -> pa.Table:
    """`launch_pairs` plus each pair's launch start, event start and event end (us); only
    ``columns`` of them when given (the others, names included, are then never built)."""
    sql = _pairs_sql(measured, times=True)
    return to_arrow(con.sql(sql if columns is None else f"SELECT {columns} FROM ({sql})"))


def summary(con: duckdb.DuckDBPyConnection, *, measured: bool = False) -> pa.Table:
    """The statistics per rank and launch call, on the replayed (or the ``measured``) clock."""
    return to_arrow(con.sql(f"""
        WITH pairs AS ({_pairs_sql(measured)})
        SELECT rank, launch,
            count(*)                                         AS launches,
            avg(cpu_us)                                      AS cpu_mean_us,
            max(cpu_us)                                      AS cpu_max_us,
            avg(gpu_us)                                      AS gpu_mean_us,
            max(gpu_us)                                      AS gpu_max_us,
            avg(delay_us)                                    AS delay_mean_us,
            quantile_cont(delay_us, 0.5)                     AS delay_p50_us,
            quantile_cont(delay_us, 0.95)                    AS delay_p95_us,
            max(delay_us)                                    AS delay_max_us,
            avg(start_delay_us)                              AS start_delay_mean_us,
            count(*) FILTER (WHERE gpu_us < cpu_us)          AS gpu_shorter,
            count(*) FILTER (WHERE cpu_us > {CPU_OUTLIER_US}) AS cpu_outliers,
            count(*) FILTER (WHERE delay_us > {DELAY_OUTLIER_US}) AS delay_outliers
        FROM pairs
        GROUP BY rank, launch
        ORDER BY rank, launches DESC, launch"""))


def run(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return summary(con)
