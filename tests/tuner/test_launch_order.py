"""Launch order that reuses what is warm: a configuration goes to the idle GPU group that loaded its
checkpoint last (the files are in that node's page cache)."""

from __future__ import annotations

from core.types import Config
from tuner.launchers.base import Slot
from tuner.sweep_state import Flight


def _config(checkpoint: str, runner: str = "auto") -> Config:
    return Config(params={"runner": runner}, flags={"model_path": checkpoint, "moe_runner_backend": runner})


def test_a_configuration_goes_where_its_checkpoint_was_loaded_last() -> None:
    slots = [Slot(0, "h", ("0",)), Slot(1, "h", ("1",)), Slot(2, "h", ("2",))]
    flight = Flight(idle=list(slots))
    assert flight.take_slot(_config("/m/nvfp4")).index == 0
    assert flight.take_slot(_config("/m/mxfp4")).index == 1
    flight.idle += [slots[0], slots[1]]  # both came back; group 2 is still idle and cold
    flight.idle.sort(key=lambda s: -s.index)
    assert flight.take_slot(_config("/m/mxfp4", "marlin")).index == 1
    assert flight.take_slot(_config("/m/nvfp4", "triton")).index == 0
    assert flight.take_slot(_config("/m/fp8")).index == 2  # nothing warm for it: the first idle
    assert not flight.idle
