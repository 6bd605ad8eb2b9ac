"""A launcher for tests of the sweep loop: the real loop, store and study; launches scripted."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from core.flags import FlagTable
from core.render import render
from core.types import Config, EngineSpec, FailureKind, TrialResult, TrialSpec
from db.store import Store
from tests.conftest import bench_result
from tuner.launchers.base import Finished, Slot
from tuner.live import SweepView
from tuner.results import SweepResults
from tuner.space import SearchSpace
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions
from workers.node import NodeInfo
from workers.trial import Phase

TABLE = FlagTable.bundled("0.5.23")
Script = Callable[[Config, int], "float | tuple[FailureKind, str]"]  # (configuration, launches before) -> result


class ScriptedLauncher:
    """One slot; each launch is answered at once with ``script(config, times launched before)``: a
    tok/s, or a failure kind and its reason line."""

    def __init__(self, engine: EngineSpec, script: Script) -> None:
        self.engine = engine
        self.starts_processes = False
        self.script = script
        self.launches: dict[str, int] = {}
        self.done: list[Finished] = []

    def start(self) -> tuple[NodeInfo, list[Slot]]:
        return NodeInfo("host", "0.5.23", TABLE, None), [Slot(0, "host", ("0",))]

    def submit(self, slot: int, spec: TrialSpec) -> None:
        key = spec.config.key()
        answer = self.script(spec.config, self.launches.get(key, 0))
        self.launches[key] = self.launches.get(key, 0) + 1
        now = time.time()
        outcome: dict[str, Any] = ({"failure_kind": answer[0], "failure_reason": answer[1]}
                                   if isinstance(answer, tuple) else {"bench": bench_result(answer)})
        self.done.append(Finished(slot, TrialResult(
            trial_number=spec.trial_number, config_key=key, argv=render(spec.config, TABLE, self.engine).argv,
            env={}, sglang_version="0.5.23", node="host", gpu_ids=("0",), started_at=now, finished_at=now,
            **outcome)))

    def wait(self, timeout_s: float) -> list[Finished]:
        done, self.done = self.done, []
        return done

    def now(self) -> float:
        return time.time()

    def phases(self) -> dict[int, Phase]:
        return {}

    def stop_all(self) -> None:
        pass

    def close(self) -> None:
        pass


def scripted_sweep(opts: SweepOptions, script: Script,
                   out: io.StringIO | None = None) -> tuple[SweepResults, ScriptedLauncher]:
    """Run the real sweep loop with launches answered by ``script``; its results (rules included) and
    the launcher (which counts launches). The live view is written to ``out``."""
    made: list[ScriptedLauncher] = []

    def make(space: SearchSpace, _: SweepOptions) -> ScriptedLauncher:
        made.append(ScriptedLauncher(space.engine(), script))
        return made[0]

    console = Console(file=out if out is not None else io.StringIO(), width=300)
    row = Sweep(opts, lambda n, b, s: SweepView(console, n, b, s), make).run()
    store = Store(opts.db_path)
    try:
        return SweepResults(row, store.runs(row.id), tuple(t for t, _ in store.rules(row.id))), made[0]
    finally:
        store.close()
