"""The sweep loop's state: what `tuner sweep` was asked, what one run works with, trials in flight, and
how many may start."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from core.types import Config, FailureKind, TrialResult
from db.coordination import Coordination
from db.store import SweepRow
from tuner.gpu_pool import Durations, GpuPool, may_backfill, reservation
from tuner.launchers.base import Launcher, Slot
from tuner.live import SweepView
from tuner.parallelism import gpus_needed, slot_gpus
from tuner.rule_book import RuleBook
from tuner.space import SearchSpace
from workers.node import NodeInfo

MAX_HELD = 4  # proposals waiting for a block of GPU groups at once
MAX_PASSED_OVER = 8  # smaller trials that may start ahead of the oldest held one (estimates can be wrong)


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
    front_at: tuple[int, ...] = ()  # after the budget: the trade-off's configurations at these concurrencies


@dataclass
class Context:
    """What one sweep run works with."""

    study: optuna.Study
    sweep: SweepRow
    space: SearchSpace
    launcher: Launcher
    node: NodeInfo
    slots: list[Slot]
    view: SweepView
    rules: RuleBook
    distinct: float
    coord: Coordination
    gpu_sizes: tuple[int, ...] = (1,)  # GPUs the space's servers use (tuner.parallelism.gpu_sizes)

    @property
    def mixed(self) -> bool:
        """The space searches parallel sizes: a trial takes as many slots as its server uses GPUs."""
        return len(self.gpu_sizes) > 1

    @property
    def slot_gpus(self) -> int:
        """GPUs per slot (GPU group)."""
        return slot_gpus(list(self.gpu_sizes))

    def slots_for(self, config: Config) -> int:
        """Slots (GPU groups of one node) a trial of ``config`` holds."""
        return gpus_needed(config.flags) // self.slot_gpus if self.mixed else 1


@dataclass
class Pending:
    """A trial in flight on its slots, or held until a block of ``slots_needed`` slots is free."""

    trial: optuna.Trial
    config: Config
    slots: tuple[Slot, ...]  # empty while held
    baseline: bool
    retry_of: int | None
    repeat_of: int | None
    remeasure: bool = False
    profile: bool = False
    curve: tuple[int, ...] = ()  # further concurrencies to measure at (--front-at)
    slots_needed: int = 1
    passed_over: int = 0  # launches of smaller trials that went ahead of it while it was held
    sent_at: float = field(default_factory=time.time)

    @property
    def slot(self) -> Slot:
        """The slot whose group runs the server (the first of the block)."""
        return self.slots[0]

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        """Every GPU of the trial's slots."""
        return tuple(g for s in self.slots for g in s.gpu_ids)


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
    """The loop's moving parts: trials in flight or held, the GPU groups, asks answered without a launch."""

    pool: GpuPool
    pending: dict[int, Pending] = field(default_factory=dict)  # by trial number, held ones included
    held: list[Pending] = field(default_factory=list)  # proposed, waiting for a block of slots (oldest first)
    waiting_on: dict[str, list[tuple[optuna.Trial, Config]]] = field(default_factory=dict)  # config key
    elsewhere: dict[str, list[tuple[optuna.Trial, Config]]] = field(default_factory=dict)  # other drivers'
    answered_in_a_row: int = 0
    need_baseline: bool = False
    budget_spent: bool = False  # a claim found the budget committed by every driver's launches
    durations: Durations = field(default_factory=Durations)  # how long trials of each size held their slots
    ends: dict[int, float] = field(default_factory=dict)  # busy slot index -> its trial's expected end

    def in_flight(self, key: str) -> bool:
        """Is a configuration with this key running (or held) now?"""
        return any(p.config.key() == key for p in self.pending.values())

    def place(self, p: Pending, now: float) -> bool:
        """Give ``p`` a block of slots if one is free and starting it there does not delay the oldest
        held trial (EASY backfilling, :mod:`tuner.gpu_pool`); one that loaded its checkpoint last first."""
        allowed: Callable[[tuple[Slot, ...]], bool] | None = None
        if self.held and self.held[0] is not p:
            reserved, starts_at = reservation(self.pool, self.held[0].slots_needed, self.ends, now)
            expected = self.durations.expect(p.slots_needed)

            def allowed(block: tuple[Slot, ...]) -> bool:
                return may_backfill(block, reserved, starts_at, now, expected)

        slots = self.pool.take(p.config.flags.get("model_path"), p.slots_needed, allowed)
        if slots is None:
            return False
        p.slots = slots
        for slot in slots:
            self.ends[slot.index] = now + (self.durations.expect(p.slots_needed) or 0.0)
        return True

    def free(self, p: Pending, held_s: float) -> None:
        """``p`` ended after holding its slots ``held_s`` seconds: they are idle again."""
        self.durations.add(p.slots_needed, held_s)
        for slot in p.slots:
            self.ends.pop(slot.index, None)
        self.pool.release(p.slots)

    def may_propose(self) -> bool:
        """Another proposal may be made: a slot is idle, few trials are held, and the oldest held one has
        not been passed over too often (then the groups drain until it fits)."""
        if not self.pool.idle or len(self.held) >= MAX_HELD:
            return False
        return not self.held or self.held[0].passed_over < MAX_PASSED_OVER


def interrupted_result(p: Pending, node: NodeInfo, why: str) -> TrialResult:
    """The result of a trial that was stopped before it could report one."""
    return TrialResult.unreported(p.trial.number, p.config, node=p.slot.host if p.slots else node.host,
                                  gpu_ids=p.gpu_ids,
                                  sglang_version=node.sglang_version, started_at=p.sent_at,
                                  kind=FailureKind.INTERRUPTED, reason=why)


def fixed_params(study: optuna.Study, trial: optuna.Trial) -> dict[str, Any]:
    """The settings a trial was queued with (``enqueue_trial``), if any."""
    fixed: dict[str, Any] = study._storage.get_trial_system_attrs(trial._trial_id).get("fixed_params") or {}
    return fixed


def carried_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """The user attributes a re-queued trial keeps: what it is (baseline; a confirmation, a surprise's
    re-measurement, a profiled or a multi-concurrency launch of trial ``repeat_of``)."""
    return {k: attrs[k] for k in ("baseline", "repeat_of", "remeasure", "profile", "curve") if k in attrs}
