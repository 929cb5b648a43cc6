"""Registers the vLLM rollout engine and the NCCL sync method."""

from trinity.plugin_api import hookimpl


@hookimpl
def trinity_register_rollout_engines(register):
    register("vllm", "trinity_vllm.engine:VLLMRolloutEngine")
    # Trinity-RFT configs name the same engine `vllm_async`.
    register("vllm_async", "trinity_vllm.engine:VLLMRolloutEngine")


@hookimpl
def trinity_register_sync_methods(register):
    register("nccl", "trinity_vllm.nccl:NCCLSync")


def _is_vllm(engine_type: str) -> bool:
    return engine_type.startswith("vllm")


def _tensor_parallel_only(rollout) -> bool:
    """Whether NCCL sync can number the engines' workers: its group counts tensor-parallel ranks only."""
    return rollout.data_parallel_size == rollout.pipeline_parallel_size == 1


@hookimpl
def trinity_config_defaults(config, issues):
    """NCCL sync is the default of vLLM engines in one run on GPUs (not with a LoRA adapter: it
    broadcasts full weights; nor with data or pipeline parallel engines)."""
    sync, rollout = config.synchronizer, config.explorer.rollout_model
    full = not config.model.lora_configs
    if (
        sync.sync_method is None
        and config.mode == "both"
        and _is_vllm(rollout.engine_type)
        and config.cluster.total_gpu_num
        and full
        and _tensor_parallel_only(rollout)
    ):
        sync.sync_method = "nccl"  # on a CPU, nccl would broadcast over gloo: memory sync needs no group


@hookimpl
def trinity_check_config(config, issues):
    """NCCL sync loads weights into tensor-parallel vLLM engines only."""
    sync, engine = config.synchronizer, config.explorer.rollout_model.engine_type
    if sync.sync_method == "nccl" and not _is_vllm(engine):
        issues.add(
            "synchronizer.sync_method",
            f"'nccl' broadcasts into vLLM engines only (explorer.rollout_model.engine_type is '{engine}'); "
            "use memory (mode both) or checkpoint, which work with every engine",
        )
    rollout = config.explorer.rollout_model
    if sync.sync_method == "nccl" and _is_vllm(engine) and not _tensor_parallel_only(rollout):
        issues.add(
            "synchronizer.sync_method",
            "'nccl' numbers each engine's tensor-parallel workers only, and explorer.rollout_model has "
            f"data_parallel_size {rollout.data_parallel_size} x pipeline_parallel_size "
            f"{rollout.pipeline_parallel_size}: use memory (mode both) or checkpoint",
        )
    if config.model.lora_configs and _is_vllm(engine) and not config.model.tinker.enable:
        if sync.sync_method == "nccl":
            issues.add(
                "synchronizer.sync_method",
                "'nccl' broadcasts the full weights into vLLM's model; a LoRA adapter (model.lora_configs) "
                "reaches vLLM as a folder: use memory (mode both) or checkpoint",
            )
        if rollout.enable_openai_api and not rollout.enable_runtime_lora_updating:
            issues.add(
                "explorer.rollout_model.enable_openai_api",
                "vLLM's OpenAI server would answer with the base model, not the trained LoRA adapter: set "
                "explorer.rollout_model.enable_runtime_lora_updating: true to serve each synced version of the "
                f"adapter as model '{adapter_name(config.model.lora_configs[0])}', or drop model.lora_configs",
            )


def adapter_name(lora) -> str:
    """The adapter's name in vLLM (its ``LoRARequest``, and on the endpoint with
    ``enable_runtime_lora_updating``): ``lora.name``, else Trinity-RFT's examples' ``lora``."""
    return lora.name or "lora"
