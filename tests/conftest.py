"""Fixtures shared across test packages: a local two-node Ray cluster (``ray_cluster``); the SST data for the
tests that need the real treebank; an op-time cache of the session's own."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: where this team keeps the Stanford Sentiment Treebank beside the repository (it is not shipped: graphsub reads
#: it from ``$GRAPHSUB_SST``); the tests that need the real data use it when it is there, and say so when it is not
_SIBLING_SST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sst"


def pytest_configure(config: pytest.Config) -> None:
    if "GRAPHSUB_SST" not in os.environ and _SIBLING_SST.is_dir():
        os.environ["GRAPHSUB_SST"] = str(_SIBLING_SST)
    # the measured cost model's op times (graphsub.cost.env.default_cache_path) start empty in every session, as on a
    # fresh CI machine, and the user's cache is neither read nor written: op times a benchmark had left in
    # ~/.cache/graphsub made the search of tests/bench/test_training_run.py find no cheaper graph (2026-12-02), and
    # times measured beside the test workers would mislead a later `graphsub optimize`
    if "GRAPHSUB_CACHE" not in os.environ:
        cache = tempfile.mkdtemp(prefix="graphsub-test-op-times-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        os.environ["GRAPHSUB_CACHE"] = cache


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, every test that uses ``ray_cluster`` runs in one worker (``xdist_group("ray")``, honoured
    by ``--dist loadgroup`` as `make test` runs it), which starts the cluster once."""
    if not config.pluginmanager.hasplugin("xdist"):  # the marker is registered by pytest-xdist
        return
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster of two nodes (a head and a second raylet, one CPU each, each offering the
    ``graphsub_timing`` resource once, as graphsub asks of every node); yields its address, connected."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (make test installs it)")
    from ray.cluster_utils import Cluster

    from graphsub.optimize.many import TIMING_RESOURCE

    here = Path(__file__).parent
    for mod in list(sys.modules.values()):  # test modules' task functions travel by value (not importable there)
        f = getattr(mod, "__file__", None)
        if f and Path(f).is_relative_to(here) and mod.__name__ != __name__:
            ray.cloudpickle.register_pickle_by_value(mod)
    node = {"num_cpus": 1, "resources": {TIMING_RESOURCE: 1}}
    c = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    c.add_node(**node)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c.address
    finally:
        ray.shutdown()
        c.shutdown()
