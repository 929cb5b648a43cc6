"""Which Ray cluster ``trinity run`` joins, and that it never waits on one that is gone
(Ray itself retries such an address for minutes)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from omegaconf import OmegaConf

from helpers.ports import free_port
from trinity.launcher import RunFailed, ray_address


@contextmanager
def listening() -> Iterator[str]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def closed_port() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def ray_tmpdir(tmp_path, monkeypatch):
    """Ray's temp dir of this test (``ray start`` records its cluster there); no RAY_ADDRESS."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "ray").mkdir()
    return tmp_path / "ray"


def no_address():
    return OmegaConf.create({"cluster": {"ray_address": ""}})


def test_without_an_address_or_a_record_ray_starts_a_local_cluster(ray_tmpdir):
    assert ray_address(no_address()) is None


def test_a_recorded_cluster_that_answers_is_joined(ray_tmpdir):
    with listening() as address:
        (ray_tmpdir / "ray_current_cluster").write_text(address + "\n")
        assert ray_address(no_address()) == address


def test_a_recorded_cluster_that_is_gone_is_skipped_with_a_warning(ray_tmpdir, caplog):
    record = ray_tmpdir / "ray_current_cluster"
    record.write_text(closed_port())
    with caplog.at_level(logging.WARNING, logger="trinity.launcher"):
        assert ray_address(no_address()) == "local"
    assert str(record) in caplog.text and "is gone" in caplog.text


def test_a_named_address_is_used_when_a_cluster_answers_there(ray_tmpdir, monkeypatch):
    with listening() as address:
        assert ray_address(OmegaConf.create({"cluster": {"ray_address": address}})) == address
        assert ray_address(OmegaConf.create({"cluster": {"ray_address": f"ray://{address}"}})) == f"ray://{address}"
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert ray_address(no_address()) == address
    assert ray_address(OmegaConf.create({"cluster": {"ray_address": "local"}})) == "local"


def test_a_named_address_where_no_cluster_answers_fails_naming_its_source(ray_tmpdir, monkeypatch):
    gone = closed_port()
    with pytest.raises(RunFailed, match=rf"cluster.ray_address is '{gone}', where no Ray cluster answers"):
        ray_address(OmegaConf.create({"cluster": {"ray_address": gone}}))
    monkeypatch.setenv("RAY_ADDRESS", gone)
    with pytest.raises(RunFailed, match=rf"RAY_ADDRESS is '{gone}', where no Ray cluster answers"):
        ray_address(no_address())


def test_auto_the_trinity_rft_default_joins_a_running_cluster_or_starts_one(ray_tmpdir):
    auto = OmegaConf.create({"cluster": {"ray_address": "auto"}})
    assert ray_address(auto) is None  # nothing recorded: a new local Ray, where Ray's own 'auto' would fail
    with listening() as address:
        (ray_tmpdir / "ray_current_cluster").write_text(address)
        assert ray_address(auto) == address


def test_node_and_gpu_counts_left_at_zero_are_read_from_the_cluster(tmp_path):
    """A Ray cluster that declares GPUs (Ray counts them as resources, so a CPU machine can
    stand in): the zeros become its alive nodes and GPUs per node, as Trinity-RFT detects them."""
    import ray

    from trinity.config.schema import Config
    from trinity.launcher import detected_cluster

    ray.init(num_cpus=1, num_gpus=2, include_dashboard=False, namespace="detect")
    try:
        assert detected_cluster(Config()) == ["cluster.node_num=1", "cluster.gpu_per_node=2"]
        given = Config.model_validate({"cluster": {"node_num": 1, "gpu_per_node": 0}})
        assert detected_cluster(given) == ["cluster.node_num=1", "cluster.gpu_per_node=2"]
        assert detected_cluster(Config.model_validate({"cluster": {"node_num": 2, "gpu_per_node": 8}})) == []
    finally:
        ray.shutdown()


def test_one_node_with_one_gpu_runs_mode_both_as_colocate():
    """Trinity-RFT's rule: on a single-GPU machine ``both`` would leave the trainer no GPU."""
    import ray

    from trinity.config.schema import Config
    from trinity.launcher import detected_cluster

    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, namespace="detect")
    try:
        assert detected_cluster(Config()) == ["cluster.node_num=1", "cluster.gpu_per_node=1", "mode=colocate"]
        assert detected_cluster(Config(), mode="explore") == ["cluster.node_num=1", "cluster.gpu_per_node=1"]
    finally:
        ray.shutdown()
