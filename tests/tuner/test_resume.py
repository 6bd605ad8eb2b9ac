"""Continuing a study after its space file was edited: allowed when Optuna can, a clear error when not."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from core.flags import FlagTable
from tuner.space_loader import load_space
from tuner.study_db import check_resumable, open_study

SPACE = """
name: resume
gpus_per_trial: 1
base: {model_path: /m}
params:
  moe_runner_backend: {choices: [auto, triton, marlin]}
  cuda_graph_max_bs: {int_range: [8, 64], step: 8}
"""


def test_changed_choices_stop_before_anything_runs(write_yaml, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = FlagTable.bundled("0.5.23")
    db = tmp_path / "t.db"
    first = load_space(write_yaml(SPACE, "space.yaml"), table)
    study = open_study(db, "resume")
    for _ in range(3):
        trial = study.ask()
        first.sample(trial)
        study.tell(trial, 1.0)
    check_resumable(study, first, db)  # the same space continues

    wider = load_space(write_yaml(SPACE.replace("[8, 64]", "[8, 128]"), "wider.yaml"), table)
    check_resumable(open_study(db, "resume"), wider, db)  # Optuna continues with a new range

    more = load_space(write_yaml(SPACE.replace("marlin]", "marlin, flashinfer_cutlass]"), "more.yaml"), table)
    with pytest.raises(ConfigError) as info:
        check_resumable(open_study(db, "resume"), more, db)
    assert str(info.value) == (
        f"{tmp_path / 'more.yaml'}: params.moe_runner_backend: now choices [auto, triton, marlin, flashinfer_cutlass], "
        f"but study 'resume' in {db} sampled it from choices [auto, triton, marlin]; give the changed space its own "
        "--study name (or put the old values back)")
    assert info.value.exit_code == 2
    assert len(open_study(db, "resume").trials) == 3  # nothing recorded was touched
