"""The sweep loop's state: what `tuner sweep` was asked, trials in flight, and how many may start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import optuna

from core.types import Config, FailureKind, TrialResult
from tuner.launchers.base import Slot
from workers.node import NodeInfo


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
    slo: str | None = None  # overrides the space's ``slo``
    profile_best: bool = False  # after the budget: one more launch of the best under SGLang's profiler


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
    profile: bool = False
    sent_at: float = field(default_factory=time.time)


@dataclass
class Quota:
    """How many more launches a phase may start: up to the budget, or the queued confirmations."""

    budget: int
    confirmations: int | None = None

    def open(self, committed: int) -> bool:
        """May another trial be launched, with ``committed`` launches done or under way (every driver's)?"""
        if self.confirmations is not None:
            return self.confirmations > 0
        return committed < self.budget


@dataclass
class Flight:
    """The loop's moving parts: trials in flight, idle slots, and asks answered without a launch."""

    idle: list[Slot]
    pending: dict[int, Pending] = field(default_factory=dict)  # by trial number
    waiting_on: dict[str, list[tuple[optuna.Trial, Config]]] = field(default_factory=dict)  # config key
    elsewhere: dict[str, list[tuple[optuna.Trial, Config]]] = field(default_factory=dict)  # other drivers'
    answered_in_a_row: int = 0
    need_baseline: bool = False
    budget_spent: bool = False  # a claim found the budget committed by every driver's launches

    warm: dict[int, Any] = field(default_factory=dict)  # slot index -> the checkpoint it loaded last

    def in_flight(self, key: str) -> bool:
        """Is a configuration with this key running now?"""
        return any(p.config.key() == key for p in self.pending.values())

    def take_slot(self, config: Config) -> Slot:
        """An idle slot for ``config``: one that loaded the same checkpoint last (its files are in that
        node's page cache, so the server loads faster), else the first idle one."""
        checkpoint = config.flags.get("model_path")
        slot = next((s for s in self.idle if checkpoint is not None and self.warm.get(s.index) == checkpoint),
                    self.idle[0])
        self.idle.remove(slot)
        self.warm[slot.index] = checkpoint
        return slot


def interrupted_result(p: Pending, node: NodeInfo, why: str) -> TrialResult:
    """The result of a trial that was stopped before it could report one."""
    return TrialResult.unreported(p.trial.number, p.config, node=p.slot.host, gpu_ids=p.slot.gpu_ids,
                                  sglang_version=node.sglang_version, started_at=p.sent_at,
                                  kind=FailureKind.INTERRUPTED, reason=why)


def fixed_params(study: optuna.Study, trial: optuna.Trial) -> dict[str, Any]:
    """The settings a trial was queued with (``enqueue_trial``), if any."""
    fixed: dict[str, Any] = study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params") or {}
    return fixed


def carried_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """The user attributes a re-queued trial keeps (baseline, confirmation, profiling)."""
    return {k: attrs[k] for k in ("baseline", "repeat_of", "profile") if k in attrs}
