"""Ground truth for the voice benchmark: where the caller's voice truly starts and ends, and
a keyword check of whether an answer is on the caller's topic.

:func:`true_bounds` is the label written next to every fixture when it is made (never the
VAD's view): the first and the last 10 ms frame whose RMS is above -45 dBFS, measured on
the clean speech before any line noise is added.

:func:`keyword_on_topic` is deliberately simple: an answer is on topic when it contains one
of a handful of words of the caller's topic id (``notes/topics.md``'s intent ids), in the
answer's language. It says nothing about whether the answer is *right*; it catches an answer
about data left to a caller asking about a bill.
"""

from __future__ import annotations

import numpy as np

from rtgate.apps.voice.frames import RATE, Pcm

__all__ = ["TOPIC_KEYWORDS", "TRUE_DB", "keyword_on_topic", "true_bounds"]

TRUE_DB = -45.0
_STEP = RATE // 100  # 10 ms

TOPIC_KEYWORDS: dict[str, tuple[str, ...]] = {
    "bill_charges": ("账单", "话费", "费用", "扣费", "收费", "bill", "charge", "fee"),
    "data_left": ("流量", "余额", "剩", "data", "balance", "left", "remaining", "gb"),
    "broadband_repair": (
        "宽带",
        "网络",
        "网速",
        "维修",
        "师傅",
        "信号",
        "路由",
        "broadband",
        "internet",
        "technician",
        "repair",
        "router",
        "wifi",
        "connection",
        "signal",
        "network",
    ),
    "broadband_renewal": ("宽带", "续约", "续费", "到期", "broadband", "renew", "contract"),
    "cancel_subscription": (
        "退订",
        "取消",
        "业务",
        "会员",
        "cancel",
        "unsubscribe",
        "subscription",
        "add-on",
    ),
    "plan_change": ("套餐", "资费", "升级", "plan", "upgrade", "downgrade", "switch"),
    "suspension_reconnection": (
        "停机",
        "复机",
        "恢复",
        "欠费",
        "挂失",
        "停",
        "suspend",
        "reconnect",
        "restore",
        "cut off",
        "payment",
        "lost",
    ),
    "roaming": ("漫游", "国际", "境外", "出国", "roaming", "abroad", "travel", "international"),
    "refund": ("退款", "退还", "退", "返还", "refund", "money back", "credit"),
    "store_hours": (
        "营业厅",
        "营业时间",
        "几点",
        "开门",
        "关门",
        "store",
        "open",
        "hours",
        "close",
    ),
    "number_transfer": (
        "携号转网",
        "转网",
        "号码",
        "运营商",
        "port",
        "transfer",
        "number",
        "carrier",
    ),
    "sim_replacement": ("补卡", "换卡", "电话卡", "sim", "card", "replacement"),
    "top_up": ("充值", "充", "缴费", "交费", "top up", "top-up", "recharge", "pay", "credit"),
}


def true_bounds(pcm: Pcm, db: float = TRUE_DB) -> tuple[float, float]:
    """Onset and end (seconds) of the voice: the first and the last 10 ms frame over ``db``
    dBFS (``(0, 0)`` when no frame is)."""
    n = len(pcm) // _STEP
    if n == 0:
        return 0.0, 0.0
    frames = np.asarray(pcm[: n * _STEP], dtype=np.float64).reshape(n, _STEP)
    level = 10.0 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > db)
    if not len(loud):
        return 0.0, 0.0
    return float(loud[0] * _STEP / RATE), float((loud[-1] + 1) * _STEP / RATE)


def keyword_on_topic(answer: str, topic: str | None) -> bool | None:
    """Whether ``answer`` mentions ``topic`` by one of its :data:`TOPIC_KEYWORDS`
    (``None`` for no topic: an out-of-domain call, or a topic id not in the table)."""
    words = TOPIC_KEYWORDS.get(topic or "")
    if not words:
        return None
    low = answer.lower()
    return any(w in low for w in words)
