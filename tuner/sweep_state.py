"""The sweep loop's state: what `tuner sweep` was asked, trials in flight, and how many may start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import optuna

from core.types import Config
from tuner.launchers.base import Slot


@dataclass(frozen=True)
class SweepOptions:
    """Everything `tuner sweep` takes."""

    space_path: str
    db_path: str = "tuner.db"
    study_name: str | None = None
    budget: int = 40
    confirm: int = 0
    address: str | None = None
    gpus: int | None = None
    max_groups: int | None = None
    sglang_python: str | None = None
    seed: int | None = None
    offline: bool = False
    sampler: str | None = None


@dataclass
class Pending:
    """A trial in flight on a slot."""

    trial: optuna.Trial
    config: Config
    slot: Slot
    baseline: bool
    retry_of: int | None
    repeat_of: int | None
    remeasure: bool = False
    sent_at: float = field(default_factory=time.time)


@dataclass
class Quota:
    """How many more launches a phase may start: up to the budget, or the queued confirmations."""

    budget: int
    confirmations: int | None = None

    def open(self, launched: int, pending: int) -> bool:
        """May another trial be launched?"""
        if self.confirmations is not None:
            return self.confirmations > 0
        return launched + pending < self.budget


@dataclass
class Flight:
    """The loop's moving parts: trials in flight, idle slots, and asks answered without a launch."""

    idle: list[Slot]
    pending: dict[int, Pending] = field(default_factory=dict)  # by trial number
    waiting_on: dict[str, list[tuple[optuna.Trial, Config]]] = field(default_factory=dict)  # config key
    answered_in_a_row: int = 0
    need_baseline: bool = False

    def in_flight(self, key: str) -> bool:
        """Is a configuration with this key running now?"""
        return any(p.config.key() == key for p in self.pending.values())
