"""A trace with no step annotations that serves requests: each request is a window, its start is
its arrival (held where it was measured), and a request thread waits inside a request on the
worker thread whose device work it needs, so faster devices shorten every request's latency."""

from __future__ import annotations

import numpy as np
import pytest

from replay.graph import build_graph
from replay.run import replay_events
from replay.whatif import parse_whatif
from tests.conftest import REAL, requires_real
from tests.replay_tables import dev, host, table

FAST_DEVICE = parse_whatif("track=dev:*:x0.1")
ARRIVALS = (0.0, 2000.0, 4000.0)


def served(arrivals: tuple[float, ...] = ARRIVALS, *, step: int = 0,
           name: str = "serve") -> object:
    """Rank 0, no ``ProfilerStep``. Per arrival ``a``, thread 2 serves a request: annotation
    ``serve`` [a, a+1200] holding ``prep`` and ``merge`` [a+120, a+1190], which sits idle until
    its ``finish`` op at a+1150. Worker thread 3 runs ``run`` [a+130, a+1140]: it launches a
    kernel (device, a+160 to a+1130) and synchronizes on it, then records an event."""
    rows: list[dict[str, object]] = []
    for i, a in enumerate(arrivals):
        c = 100 + i
        rows += [host(0, a, 1200, name=name, kind="annotation", tid=2, step=step),
                 host(0, a + 10, 100, name="prep", depth=1, tid=2, step=step),
                 host(0, a + 120, 1070, name="merge", kind="runtime", depth=1, tid=2, step=step),
                 host(0, a + 1150, 30, name="finish", depth=2, tid=2, step=step),
                 host(0, a + 130, 1010, name="run", kind="runtime", tid=3, step=step),
                 host(0, a + 140, 10, name="cudaLaunchKernel", kind="runtime", depth=1, tid=3,
                      correlation=c, step=step),
                 host(0, a + 155, 980, name="synchronizeStream", kind="runtime", depth=1,
                      tid=3, step=step),
                 host(0, a + 1136, 2, name="recordEvent", kind="runtime", depth=1, tid=3,
                      step=step),
                 host(0, a + 1138, 1, name="updateContext", kind="runtime", depth=1, tid=3,
                      step=step),
                 dev(0, a + 160, 970, correlation=c, step=step)]
    return table(rows)


def _totals(r) -> np.ndarray:  # noqa: ANN001
    return r.steps.column("total_us").to_numpy()


def test_each_request_is_a_window_and_faster_devices_shorten_it() -> None:
    t = served()
    g = build_graph(t)
    base = replay_events(t, graph=g)
    fast = replay_events(t, graph=g, whatifs=[FAST_DEVICE])
    # the kernel 873 us shorter: the worker's sync returns, ``merge`` resumes and each request
    # ends that much earlier (before: one window, the recording, 5200 us either way: ``merge``
    # kept its measured idle time and the last arrival set the end)
    assert _totals(fast).mean() == pytest.approx(1200.0 - 873.0, abs=2.0)
    # as measured: three windows of 1200 us each
    assert _totals(base).tolist() == [1200.0, 1200.0, 1200.0]
    assert g.notes["requests"] == {"windows": 3, "types": {"serve": 3}, "released": 2}
    # arrivals hold: a request that ends sooner does not start the next one sooner
    starts = fast.steps.column("start_us").to_numpy() - fast.steps.column("start_us")[0].as_py()
    assert starts.tolist() == pytest.approx(list(ARRIVALS))


def test_a_slower_request_delays_the_next_one_without_its_idle_gap() -> None:
    t = served((0.0, 1500.0, 3000.0))
    g = build_graph(t)
    slow = replay_events(t, graph=g, whatifs=[parse_whatif("track=dev:*:x2")])
    _, second, _ = slow.steps.column("start_us").to_numpy() - slow.steps.column(
        "start_us")[0].as_py()
    ends_first = float(slow.steps.column("end_us")[0].as_py()) - float(
        slow.steps.column("start_us")[0].as_py())
    assert ends_first > 1500.0  # the first request runs past the second's arrival
    # the second starts when its thread is free, not after the 300 us idle gap measured before it
    assert second == pytest.approx(ends_first, abs=1.0)


def test_steps_and_loops_keep_their_windows() -> None:
    # with ProfilerStep marks the windows are the steps, whatever the annotations
    rows = [{k: v for k, v in r.items() if k != "event_id"} | {"step": 1}
            for r in served().to_pylist()]
    rows.append(host(0, 0, 5300, name="ProfilerStep#1", kind="annotation", tid=2, step=1))
    assert replay_events(table(rows)).steps.num_rows == 1
    # a recurring annotation that follows other work (a loop's phase), not idle time: the
    # recording stays one window
    loop = [host(0, 0, 10_000, name="loop", tid=2, step=0)]
    for i in range(3):
        loop += [host(0, 10 + 1000 * i, 900, name="## forward ##", kind="annotation", depth=1,
                      tid=2, step=0),
                 host(0, 20 + 1000 * i, 800, name="mm", depth=2, tid=2, step=0)]
    assert replay_events(table(loop)).steps.num_rows == 1


@requires_real
def test_real_mtia_inference_requests_shorten_with_faster_devices(cli, tmp_path) -> None:  # noqa: ANN001
    import json

    from mtia_trace.ingest import load

    path = REAL / "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not found")
    events = load(path).events
    g = build_graph(events)
    base = replay_events(events, graph=g)
    # devices 10x faster: the mean request latency drops (before: the recording, 1.000x, its
    # length set by the last arrival and gif_merge's measured idle time)
    fast = replay_events(events, graph=g, whatifs=[FAST_DEVICE])
    assert _totals(fast).mean() < 0.8 * _totals(base).mean()
    assert _totals(base) == pytest.approx(base.steps.column("measured_us").to_numpy(), rel=1e-3)
    req = g.notes["requests"]
    assert req["types"].get("Stage::PyTorchMRSGIFTask::run", 0) >= 30  # type: ignore[index]

    def mean_step(*extra: str) -> tuple[float, str]:
        code, out, _ = cli("replay", path, "--hw", "mtia300", "-o", tmp_path, "--force",
                           "--format", "json", *extra)
        assert code == 0
        run = json.loads(out)["runs"][0]
        steps = [s["total_us"] for s in run["steps"]]
        return sum(steps) / len(steps), run["path"]

    on, run = mean_step()
    on_fast, _ = mean_step("--whatif", "track=dev:*:x0.1")
    assert on_fast < on  # on the target too (where its device work already costs little)
    code, out, _ = cli("report", run, "--format", "json")
    assert code == 0
    v = json.loads(out)["verdict"]
    assert v["label"] != "host-bound"  # devices measured 91.7% busy: never called host-bound
    assert v["windows"] == "requests" and "requests" in v["text"]
