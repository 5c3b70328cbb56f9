"""Retransmission time after packet loss, drawn over arrays, and how a stall reaches the peers.

Per collective event, the packets that crossed a NIC are ``ceil(nic_bytes / mtu)``; the last
packet of each message is a *tail* packet. With loss rate q, the lost non-tail packets and the
lost tail packets are Poisson(q x count), drawn by inverse CDF from two uniforms per event (so a
lower loss rate with the same seed never loses more packets). Costs per loss (docs/concepts.md §5, "Retry"):

- mid-stream loss: the next packet reveals the gap (the receiver NAKs it), one RTT after the
  lost packet left. Under go-back-N (RoCE/IB RC NICs) the sender then resends everything after
  the lost packet: the window in flight during that RTT is discarded, ``rtt + t_pkt``. Under
  selective repeat only the lost packet is resent while the window keeps flowing: ``t_pkt``.
- tail loss: no later packet reveals it, so the sender waits for its retransmission timeout,
  then resends: ``RTO + t_pkt``. The RTO is the NIC generation's (`rto_us`): a fixed timer
  (``loss.rto_us``, or the IB formula 4.096 us x 2^``loss.ib_timeout``), or with ``loss.rto_model
  = "adaptive"`` (NVIDIA ConnectX adaptive retransmission) the first, adaptive, timeout
  ``loss.adaptive_rto_us``, capped by the QP's IB timeout.

Coupling (`couple`): a collective's data moves through its peers, so a stalled transfer delays
every peer waiting on it. In a ring-based collective (AllReduce, ReduceScatter, AllGather,
Broadcast, Reduce) every member's pipeline waits for each stalled step: each member takes the
sum of the group's stalls. In an all-to-all a stall delays its own rank and the one peer whose
flow carried the lost packet (drawn from a third uniform). Instances are matched by process
group and sequence number, as the graph matches them; events without both stay uncoupled.
"""

from __future__ import annotations

import math

import numpy as np

from replay.hardware.collectives import OPS
from replay.hardware.spec import HardwareSpec

#: Above this mean, Poisson quantiles use the normal approximation (continuity-corrected).
_EXACT_MAX_MEAN = 30.0


def rto_us(spec: HardwareSpec) -> float:
    """Timeout before a lost tail packet is resent: the adaptive first timeout
    (``loss.rto_model = "adaptive"``, capped by the IB timeout), else ``loss.rto_us``, else the
    IB formula 4.096 us x 2^``loss.ib_timeout``."""
    ib = (4.096 * 2.0 ** int(spec.value("loss.ib_timeout"))
          if spec.get("loss.ib_timeout") is not None else math.inf)
    if spec.get("loss.rto_model", "fixed") == "adaptive":
        return min(float(spec.value("loss.adaptive_rto_us")), ib)
    if spec.get("loss.rto_us") is not None:
        return float(spec.value("loss.rto_us"))
    return ib


def norm_ppf(u: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
         3.754408661907416e+00)
    u = np.clip(u, 1e-300, 1 - 1e-16)
    lo, hi = u < 0.02425, u > 1 - 0.02425
    q = np.sqrt(-2 * np.log(np.where(lo, u, np.where(hi, 1 - u, 0.5))))
    tail = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    r = (u - 0.5) ** 2
    mid = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * (u - 0.5) / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    return np.where(lo, tail, np.where(hi, -tail, mid))


def poisson_quantile(u: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Smallest k with P(X <= k) >= u for X ~ Poisson(mean); nondecreasing in u and in mean."""
    k = np.zeros(len(u))
    exact = mean <= _EXACT_MAX_MEAN
    if exact.any():
        lam, uu = mean[exact], u[exact]
        pmf = np.exp(-lam)
        cdf = pmf.copy()
        kk = np.zeros(len(lam))
        for i in range(1, int(_EXACT_MAX_MEAN * 3 + 40)):
            below = cdf < uu
            if not below.any():
                break
            kk += below
            pmf = pmf * lam / i
            cdf = cdf + pmf
        k[exact] = kk
    big = ~exact
    if big.any():
        lam = mean[big]
        k[big] = np.maximum(0.0, np.floor(lam + np.sqrt(lam) * norm_ppf(u[big]) + 0.5))
    return k


def retry_costs(spec: HardwareSpec, loss_rate: float, nic_bytes: np.ndarray,
                nic_messages: np.ndarray, nic_bw: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Extra time (us) per event from retransmissions; ``uniforms`` is (2, n) in [0, 1)."""
    n = len(nic_bytes)
    if loss_rate <= 0 or n == 0:
        return np.zeros(n)
    mtu = float(spec.value("loss.mtu_bytes"))
    rtt = float(spec.value("loss.rtt_us"))
    packets = np.ceil(nic_bytes / mtu)
    tails = np.minimum(nic_messages, packets)
    t_pkt = mtu / np.maximum(nic_bw, 1e-12)
    lost_mid = poisson_quantile(uniforms[0], (packets - tails) * loss_rate)
    lost_tail = poisson_quantile(uniforms[1], tails * loss_rate)
    return lost_mid * _per_mid(spec, rtt, t_pkt) + lost_tail * (rto_us(spec) + t_pkt)


def _per_mid(spec: HardwareSpec, rtt: float, t_pkt):  # noqa: ANN001, ANN202
    """Time one mid-stream loss costs: NAK after one RTT, then the window (go-back-N) or the
    one packet (selective repeat) resent."""
    return rtt + t_pkt if spec.value("loss.recovery") == "go_back_n" else t_pkt


#: ring-pipelined collectives: every member waits for every stalled step
RING_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def couple(op: np.ndarray, instance: np.ndarray, own: np.ndarray, u_peer: np.ndarray
           ) -> np.ndarray:
    """Per event, the retransmission stall it waits for: its own plus what its peers' stalls
    impose on it (module docstring). ``op``: `collectives.OPS` codes; ``instance``: the
    collective instance per event (-1: unmatched, left alone); ``u_peer``: uniforms in [0, 1)
    choosing the peer an all-to-all stall reaches."""
    out = own.astype(np.float64).copy()
    m = (instance >= 0) & (own >= 0)
    if not m.any():
        return out
    idx = np.flatnonzero(m)
    inst = instance[idx]
    order = np.lexsort((idx, inst))
    idx, inst = idx[order], inst[order]
    first = np.r_[True, inst[1:] != inst[:-1]]
    gid = np.cumsum(first) - 1
    size = np.bincount(gid)
    start = np.flatnonzero(first)
    pos = np.arange(len(idx)) - start[gid]
    ring = np.isin(op[idx], [OPS.index(o) for o in RING_OPS])
    total = np.bincount(gid, weights=own[idx])
    out[idx[ring]] = total[gid[ring]]
    a2a = op[idx] == OPS.index("all_to_all")
    if a2a.any():
        # the stall of member i reaches the member (i + 1 + floor(u (p - 1))) mod p
        p = size[gid]
        hop = 1 + np.floor(u_peer[idx] * np.maximum(p - 1, 1)).astype(np.int64)
        dest = start[gid] + (pos + hop) % p
        got = np.zeros(len(idx))
        sel = a2a & (own[idx] > 0) & (p > 1)
        np.maximum.at(got, dest[sel], own[idx][sel])
        out[idx[a2a]] = np.maximum(own[idx[a2a]], got[a2a])
    return out


def expected_retry_us(spec: HardwareSpec, loss_rate: float, nic_bytes: float,
                      nic_messages: float, nic_bw: float) -> float:
    """Mean of `retry_costs` (a rank's own stall, before `couple`) for one event."""
    mtu = float(spec.value("loss.mtu_bytes"))
    packets = math.ceil(nic_bytes / mtu)
    tails = min(nic_messages, packets)
    t_pkt = mtu / nic_bw
    per_mid = _per_mid(spec, float(spec.value("loss.rtt_us")), t_pkt)
    return loss_rate * ((packets - tails) * per_mid + tails * (rto_us(spec) + t_pkt))
