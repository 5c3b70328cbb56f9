"""Retransmission time after packet loss, drawn over arrays.

Per collective event, the packets that crossed a NIC are ``ceil(nic_bytes / mtu)``; the last
packet of each message is a *tail* packet. With loss rate q, the lost non-tail packets and the
lost tail packets are Poisson(q x count), drawn by inverse CDF from two uniforms per event (so a
lower loss rate with the same seed never loses more packets). Costs per loss (HARDWARE.md 2.5):

- go-back-N (RoCE RC NICs): a lost packet is NACKed by the next one and the sender resends the
  whole window W = ceil(RTT / t_pkt) packets: W x t_pkt. A lost tail packet has no successor, so
  it waits for the RC timeout RTO = 4.096 us x 2^NCCL_IB_TIMEOUT, then resends: RTO + t_pkt.
- selective repeat (MetaRoCE-style endpoint recovery): only the lost packet is resent while the
  window keeps flowing: t_pkt; a lost tail waits for the us-scale endpoint RTO: RTO + t_pkt.
"""

from __future__ import annotations

import math

import numpy as np

from replay.hardware.spec import HardwareSpec

#: Above this mean, Poisson quantiles use the normal approximation (continuity-corrected).
_EXACT_MAX_MEAN = 30.0


def rto_us(spec: HardwareSpec) -> float:
    """Retransmission timeout: ``loss.rto_us`` or the IB formula from ``loss.ib_timeout``."""
    if spec.get("loss.rto_us") is not None:
        return float(spec.value("loss.rto_us"))
    return 4.096 * 2.0 ** int(spec.value("loss.ib_timeout"))


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
    if spec.value("loss.recovery") == "go_back_n":
        window = np.maximum(1.0, np.ceil(rtt / t_pkt))
        per_mid = window * t_pkt
    else:
        per_mid = t_pkt
    return lost_mid * per_mid + lost_tail * (rto_us(spec) + t_pkt)


def expected_retry_us(spec: HardwareSpec, loss_rate: float, nic_bytes: float,
                      nic_messages: float, nic_bw: float) -> float:
    """Mean of `retry_costs` for one event (for checks and reports)."""
    mtu = float(spec.value("loss.mtu_bytes"))
    packets = math.ceil(nic_bytes / mtu)
    tails = min(nic_messages, packets)
    t_pkt = mtu / nic_bw
    if spec.value("loss.recovery") == "go_back_n":
        per_mid = max(1.0, math.ceil(float(spec.value("loss.rtt_us")) / t_pkt)) * t_pkt
    else:
        per_mid = t_pkt
    return loss_rate * ((packets - tails) * per_mid + tails * (rto_us(spec) + t_pkt))
