"""nccl weight sync into a real vLLM engine, over gloo on this CPU: this test process is the
trainer (rank 0, a changed state dict) and the explorer; the engine's worker is rank 1."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from .nccl_member import member

pytest.importorskip("vllm")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from trinity.config.schema import Config  # noqa: E402
from trinity.model.engines import SamplingArgs  # noqa: E402
from trinity.rollout.client import EngineClient  # noqa: E402
from trinity.synchronizer.methods import SyncTimeout  # noqa: E402
from trinity_vllm.nccl import GroupAddress, NCCLSync, NCCLSyncError, buckets, meta_of  # noqa: E402


def sync_config(timeout: int = 60) -> Config:
    config = Config()
    config.ray_namespace = "trinity-vllm-tests"
    config.cluster.gpu_per_node = 0  # gloo
    config.synchronizer.sync_timeout = timeout
    return config


@pytest.fixture
def coordinator(ray_session):
    """A fresh coordinator per test, as the launcher makes one per run (and removes it)."""
    import ray

    config = sync_config()
    (shared,) = NCCLSync.shared_actors(config)
    actor = shared.start(config.ray_namespace)
    yield actor
    ray.kill(actor)


def logprobs_with(model_dir: Path, weights: dict[str, torch.Tensor], ids: list[int]) -> torch.Tensor:
    """Logprob of every token after the first, from a transformers forward with ``weights``."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(weights, strict=False)  # the tied head is the embeddings
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    return logits.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_broadcast_loads_the_newest_published_weights_into_vllm(coordinator, vllm_engine, tiny_model_dir) -> None:
    """Publishing never waits for the explorer; its fetch gets the newest kept version by
    broadcast, and vLLM's logprobs become those of a transformers forward with it."""
    trainer, explorer = NCCLSync(sync_config()), NCCLSync(sync_config())
    explorer.connect([EngineClient(vllm_engine)])
    first = vllm_engine.generate(["The quick brown fox"], SamplingArgs(temperature=0.0, max_tokens=8))[0][0]
    ids = first.prompt_token_ids + first.response_token_ids
    before = torch.tensor(vllm_engine.logprobs([ids])[0])
    original = load_file(str(tiny_model_dir / "model.safetensors"))
    changed = {k: v * 1.5 if v.dim() == 2 else v for k, v in original.items()}
    assert explorer.fetch(1, timeout=0) is None  # nothing published yet
    started = time.monotonic()
    trainer.publish({k: v * 0.5 for k, v in original.items()}, 1)
    trainer.publish(changed, 2)  # version 1 is never taken: no one waits for it
    assert time.monotonic() - started < 2
    try:
        started = time.monotonic()
        update = explorer.fetch(1, timeout=30)
        print(f"nccl (gloo) sync of the tiny model: {time.monotonic() - started:.2f} s")
        assert (update.version, update.loaded, update.state_dict, update.path) == (2, True, None, None)
        assert vllm_engine.model_version == 2
        after = torch.tensor(vllm_engine.logprobs([ids])[0])
        assert (after - before).abs().max() > 0.01
        torch.testing.assert_close(after[1:], logprobs_with(tiny_model_dir, changed, ids), atol=1e-4, rtol=0)
        assert vllm_engine.generate(["12+7="], SamplingArgs(max_tokens=2))[0][0].model_version == 2
    finally:
        trainer.publish(original, 3)  # the shared engine goes back to its weights
        assert explorer.fetch(3, timeout=30).version == 3
    assert vllm_engine.model_version == 3
    torch.testing.assert_close(torch.tensor(vllm_engine.logprobs([ids])[0]), before, atol=1e-6, rtol=0)


def test_an_explorer_waiting_for_an_unpublished_version_times_out(coordinator) -> None:
    """With no version >= 2 published in time the explorer gets ``SyncTimeout``, as with the other methods."""
    trainer, explorer = NCCLSync(sync_config()), NCCLSync(sync_config())
    trainer.publish({"w": torch.ones(2)}, 1)
    with pytest.raises(SyncTimeout, match="no weights of version >= 2 published after 2 s"):
        explorer.fetch(2, timeout=2.0)


def test_a_side_that_never_joins_fails_both_with_its_cause(ray_session) -> None:
    """The explorer asks but its engine (rank 1) never joins the group: the trainer's join
    times out after sync_timeout, and both sides then raise the trainer's error."""
    import ray

    config = sync_config(timeout=2)
    (shared,) = NCCLSync.shared_actors(config)
    coordinator = shared.start(config.ray_namespace)
    try:
        trainer, explorer = NCCLSync(config), NCCLSync(config)
        trainer.publish({"w": torch.ones(2)}, 1)
        explorer.fetch(1, timeout=5)  # connected to no engine: nothing joins as rank 1
        trainer._server.join(timeout=30)  # the trainer's thread ends with its failed join
        cause = (
            r"nccl weight sync failed: trainer side: rank 0 of the weight group \(2 members, gloo .*\): "
            r"not every member joined within sync_timeout \(2 s\)"
        )
        with pytest.raises(NCCLSyncError, match=cause):
            trainer.publish({"w": torch.ones(2)}, 2)
        with pytest.raises(NCCLSyncError, match=cause):
            explorer.fetch(1, timeout=0)
    finally:
        ray.kill(coordinator)


def test_connect_refuses_other_engines(coordinator, tiny_model_dir) -> None:
    from trinity.config.schema import InferenceModelConfig, ModelConfig
    from trinity.rollout.transformers_rollout import TransformersRolloutEngine

    engine = TransformersRolloutEngine(InferenceModelConfig(model_path=str(tiny_model_dir)), ModelConfig())
    with pytest.raises(TypeError, match=r"sync_method 'nccl' .* not TransformersRolloutEngine.*engine_type: vllm"):
        NCCLSync(sync_config()).connect([EngineClient(engine)])


@pytest.mark.parametrize(
    "backend",
    [
        "gloo",
        pytest.param(
            "nccl",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU per rank: two GPUs"),
            ],
        ),
    ],
)
def test_weight_group_broadcasts_every_tensor(backend: str) -> None:
    """Two processes of the group, names, dtypes and values intact (NCCL on CUDA tensors), in buckets
    of 80 bytes (weight_sync_buffer_size): a and d together, b (another dtype) and c alone."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    address = asdict(GroupAddress("127.0.0.1", store.port, 2, backend, 60.0, "test_group", 80))
    weights = {
        "a": torch.randn(3, 4),
        "d": torch.randn(7),
        "b": torch.arange(5, dtype=torch.bfloat16),
        "c": torch.ones(2, 2).t(),
    }
    spawn = multiprocessing.get_context("spawn")
    received = spawn.Queue()
    members = [spawn.Process(target=member, args=(address, rank, weights, received)) for rank in (0, 1)]
    for process in members:
        process.start()
    got = {name: torch.tensor(values, dtype=getattr(torch, dtype)) for name, dtype, values in received.get(timeout=120)}
    for process in members:
        process.join(timeout=60)
    assert [m.exitcode for m in members] == [0, 0]
    assert list(got) == list(weights)
    for name, tensor in weights.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=0)


def test_buckets_group_neighbours_of_one_dtype_within_the_buffer_size() -> None:
    meta = meta_of(
        {"a": torch.zeros(4), "b": torch.zeros(4), "c": torch.zeros(2, dtype=torch.bfloat16), "d": torch.zeros(8)}
    )
    assert buckets(meta, 2**20) == [[0, 1], [2], [3]]  # the bf16 tensor breaks the float32 run
    weights = meta_of(
        {"a": torch.zeros(3, 4), "d": torch.zeros(7), "b": torch.zeros(5, dtype=torch.bfloat16), "c": torch.zeros(2, 2)}
    )
    assert buckets(weights, 80) == [[0, 1], [2], [3]]  # as the broadcast test sends them
    assert buckets(meta, 16) == [[0], [1], [2], [3]]  # 16 bytes: one float32 tensor of 4 fills a bucket
    assert buckets(meta, 8) == [[0], [1], [2], [3]]  # larger than the buffer: alone


def test_group_name_and_buffer_size_come_from_the_config() -> None:
    config = sync_config()
    config.synchronizer.group_name = "policy_weights"
    config.explorer.rollout_model.weight_sync_buffer_size = 64
    (shared,) = NCCLSync.shared_actors(config)
    (address,) = shared.args
    assert (address["name"], address["bucket_bytes"]) == ("policy_weights", 64 * 2**20)
