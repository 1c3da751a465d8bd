"""Calibration look-ups: the metric rows of finished replays (read only)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.replays.models import SUCCEEDED, MetricRow, Replay

CALIBRATION_METRICS = ("false_accept_rate", "false_reject_rate", "defer_rate", "minimum_sufficient_budget")


def calibration_rows(session: Session, dataset_id: uuid.UUID, *, policies: list[str], floor: str, delta: float,
                     a: float, group: str | None) -> list[dict[str, Any]]:
    """Metric rows of succeeded replays of the dataset for one of ``policies`` at this
    floor, δ, level and grouping; newest replay first."""
    stmt = (
        select(Replay.id, Replay.finished_at, MetricRow.policy, MetricRow.bootstrap, MetricRow.budget,
               MetricRow.metric, MetricRow.value)
        .join(MetricRow, MetricRow.replay_id == Replay.id)
        .where(
            Replay.dataset_id == dataset_id,
            Replay.status == SUCCEEDED,
            MetricRow.policy.in_(policies),
            MetricRow.floor == floor,
            MetricRow.delta.between(delta - 1e-9, delta + 1e-9),
            MetricRow.a.between(a - 1e-9, a + 1e-9),
            MetricRow.metric.in_(CALIBRATION_METRICS),
            MetricRow.grouping.is_(None) if group is None else MetricRow.grouping == group,
        )
        .order_by(Replay.finished_at.desc(), Replay.id, MetricRow.id)
    )
    return [row._asdict() for row in session.execute(stmt)]
