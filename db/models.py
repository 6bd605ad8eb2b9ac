"""SQLAlchemy 2.x schema of the tuner's own tables (prefixed ``tuner_`` beside Optuna's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of the tuner's tables."""


class SweepRecord(Base):
    """One sweep = one Optuna study: the space it ran and the hardware/software it ran on."""

    __tablename__ = "tuner_sweeps"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    space_path: Mapped[str] = mapped_column(Text)
    space_text: Mapped[str] = mapped_column(Text)
    engine: Mapped[str] = mapped_column(String(20))
    sglang_version: Mapped[str] = mapped_column(String(50))
    gpu_name: Mapped[str] = mapped_column(String(200))
    gpu_arch: Mapped[str | None] = mapped_column(String(20))
    gpu_count: Mapped[int] = mapped_column(Integer)  # GPUs of one server (gpus_per_trial), not of the node
    driver: Mapped[str] = mapped_column(String(50))
    hosts: Mapped[list[str]] = mapped_column(JSON)
    budget: Mapped[int] = mapped_column(Integer)
    roofline_tok_s: Mapped[float | None] = mapped_column(Float)
    time_scale: Mapped[float] = mapped_column(Float, default=1.0)
    objective: Mapped[str | None] = mapped_column(String(20))  # a core.types.Objective value (None: per_server)


class TrialRun(Base):
    """One trial: what was launched, what happened, every metric, the evidence."""

    __tablename__ = "tuner_trial_runs"
    __table_args__ = (UniqueConstraint("sweep_id", "trial_number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("tuner_sweeps.id"), index=True)
    trial_number: Mapped[int] = mapped_column(Integer)
    config_key: Mapped[str] = mapped_column(String(32), index=True)
    baseline: Mapped[bool] = mapped_column(Boolean, default=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    flags: Mapped[dict[str, Any]] = mapped_column(JSON)
    argv: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))  # a core.types.RunStatus value
    failure_kind: Mapped[str | None] = mapped_column(String(30))
    failure_reason: Mapped[str] = mapped_column(Text, default="")
    log_tail: Mapped[str] = mapped_column(Text, default="")
    server_log: Mapped[str] = mapped_column(Text, default="")
    tok_s: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    gate: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    startup_s: Mapped[float | None] = mapped_column(Float)
    sglang_version: Mapped[str] = mapped_column(String(50), default="")
    node: Mapped[str] = mapped_column(String(200), default="")
    gpu_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    cached_from: Mapped[int | None] = mapped_column(Integer)
    repeat_of: Mapped[int | None] = mapped_column(Integer)
    remeasure: Mapped[bool | None] = mapped_column(Boolean)  # a repeat of a surprise: counts in the budget
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # KernelProfile.as_dict(), or {"error": why}
    curve: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)  # the benchmark at further concurrencies
    ran_as: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # settings the server ran otherwise than asked


class LearnedRule(Base):
    """A failure rule the sweep learned (tuner.failure_rules), replaced as a whole after each launch."""

    __tablename__ = "tuner_learned_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("tuner_sweeps.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    rule: Mapped[dict[str, Any]] = mapped_column(JSON)


class DriverRecord(Base):
    """A `tuner sweep` process working on a sweep; alive while its heartbeat is fresh (or, on this
    host, while its process exists)."""

    __tablename__ = "tuner_drivers"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # host:pid:process start time
    sweep_id: Mapped[int] = mapped_column(ForeignKey("tuner_sweeps.id"), index=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime)


class LaunchClaim(Base):
    """A configuration being launched by a driver: at most one per configuration and sweep, and the
    counted ones count in the budget until the trial's run is recorded (which removes the claim)."""

    __tablename__ = "tuner_launch_claims"
    __table_args__ = (UniqueConstraint("sweep_id", "config_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("tuner_sweeps.id"), index=True)
    config_key: Mapped[str] = mapped_column(String(32))
    trial_number: Mapped[int] = mapped_column(Integer)
    driver: Mapped[str] = mapped_column(String(200))
    counted: Mapped[bool] = mapped_column(Boolean)
