"""Registers the vLLM rollout engine and the NCCL sync method."""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_rollout_engines(register):
    register("vllm", "trinity_vllm.engine:VLLMRolloutEngine")
    # Trinity-RFT configs name the same engine `vllm_async`.
    register("vllm_async", "trinity_vllm.engine:VLLMRolloutEngine")


@hookimpl
def trinity_register_sync_methods(register):
    register("nccl", "trinity_vllm.nccl:NCCLSync")
