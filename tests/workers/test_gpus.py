"""GPU discovery and release through nvidia-smi: a stand-in nvidia-smi on PATH prints what real drivers print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workers.gpus import detect_gpus, gpu_pids, wait_gpus_released

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.95.05, 97887"


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[str], apps: list[str]) -> None:
    """An nvidia-smi that answers --query-gpu with ``gpus`` and --query-compute-apps with ``apps``."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nimport sys\n"
                   f"rows = {apps!r} if any(a.startswith('--query-compute-apps') for a in sys.argv) else {gpus!r}\n"
                   "print('\\n'.join(rows))\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_eight_blackwell_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, [RTX_PRO_6000] * 8, ["4242", "4343"])
    gpu = detect_gpus()
    assert gpu is not None
    assert (gpu.name, gpu.arch, gpu.count, gpu.driver, gpu.memory_gb) == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120", 8, "580.95.05", 95.6)
    assert gpu_pids() == {4242, 4343}


def test_fields_an_old_driver_cannot_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, ["Tesla V100-SXM2-32GB, [N/A], 470.82.01, [N/A]"] * 2, [])
    gpu = detect_gpus()
    assert gpu is not None and (gpu.arch, gpu.count, gpu.memory_gb) == (None, 2, 0.0)


def test_no_nvidia_smi_means_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() is None and gpu_pids() is None


def test_release_waits_for_our_processes_to_exit_and_leave_the_gpus(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    _fake_smi(tmp_path, monkeypatch, [RTX_PRO_6000], [str(child.pid)])
    assert not wait_gpus_released({child.pid}, timeout_s=0.3, poll_s=0.05)  # still running
    assert child.stdin is not None
    child.stdin.close()
    child.wait(10)
    assert not wait_gpus_released({child.pid}, timeout_s=0.3, poll_s=0.05)  # exited, but the GPU still lists it
    _fake_smi(tmp_path, monkeypatch, [RTX_PRO_6000], ["999999999"])
    assert wait_gpus_released({child.pid}, timeout_s=5, poll_s=0.05)
