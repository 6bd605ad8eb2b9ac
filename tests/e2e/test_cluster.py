"""`tuner sweep --address` against an existing multi-node Ray cluster (two fake nodes, 2 GPUs each)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import our_servers, run_tuner

pytestmark = pytest.mark.e2e


@pytest.fixture
def two_node_cluster(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("HOME", str(workdir / "home"))  # Ray's auth token goes there, shared with the CLI
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1, "num_gpus": 2})
    try:
        cluster.add_node(num_cpus=1, num_gpus=2)
        cluster.wait_for_nodes()
        yield str(cluster.address)
    finally:
        cluster.shutdown()


def test_groups_spread_over_the_nodes_of_an_existing_cluster(workdir: Path, two_node_cluster: str) -> None:
    proc = run_tuner(workdir, "sweep", "--space", "e2e-space.yaml", "--budget", "4", "--address",
                     two_node_cluster)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    nodes = re.findall(r"group \d: \S+ \(Ray node (\w+)\), GPUs", proc.stdout)
    assert len(nodes) == 2 and len(set(nodes)) == 2, proc.stdout
    assert "[4/4]" in proc.stdout
    assert not our_servers(workdir)
