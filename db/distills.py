"""Distillation jobs in the store: plain entities in and out, like db.store."""

from __future__ import annotations

from sqlalchemy import or_, select, update

from db import entities as E
from db.connect import StoreBase
from db.models import Distill, utcnow

UPDATABLE = {"status", "losses", "stage_seconds", "before_run_id", "after_run_id", "evaluation", "error", "out_dir"}


def _info(d: Distill) -> E.DistillInfo:
    return E.DistillInfo(
        d.id,
        d.created_at,
        d.finished_at,
        d.status,
        dict(d.config or {}),
        d.out_dir,
        list(d.losses or []),
        dict(d.stage_seconds or {}),
        d.before_run_id,
        d.after_run_id,
        None if d.evaluation is None else dict(d.evaluation),
        d.error,
    )


class Distills(StoreBase):
    def create_distill(self, config: dict, out_dir: str) -> E.DistillInfo:
        with self.session_scope() as s:
            d = Distill(status="running", config=config, out_dir=out_dir, losses=[], stage_seconds={})
            s.add(d)
            s.flush()
            return _info(d)

    def set_distill_fields(self, distill_id: int, **values) -> None:
        unknown = set(values) - UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        if values.get("status") in ("done", "failed"):
            values["finished_at"] = utcnow()
        with self.session_scope() as s:
            s.execute(update(Distill).where(Distill.id == distill_id).values(**values))

    def get_distill(self, distill_id: int) -> E.DistillInfo | None:
        with self.session_scope() as s:
            d = s.get(Distill, distill_id)
            return None if d is None else _info(d)

    def latest_distill(self, out_dir: str) -> E.DistillInfo | None:
        """The unfinished job writing to out_dir, so a resumed command continues the same row."""
        with self.session_scope() as s:
            d = s.scalars(
                select(Distill)
                .where(Distill.out_dir == out_dir, Distill.status != "done")
                .order_by(Distill.id.desc())
                .limit(1)
            ).first()
            return None if d is None else _info(d)

    def distill_for_run(self, run_id: int) -> E.DistillInfo | None:
        """The distillation whose before or after evaluation is this run."""
        with self.session_scope() as s:
            d = s.scalars(
                select(Distill)
                .where(or_(Distill.before_run_id == run_id, Distill.after_run_id == run_id))
                .order_by(Distill.id.desc())
                .limit(1)
            ).first()
            return None if d is None else _info(d)
