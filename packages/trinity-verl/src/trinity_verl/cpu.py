"""verl on a CPU, through verl's own extension points (no file of verl is changed).

verl 0.9.1 registers its FSDP engines for cuda/npu only. ``enable_cpu()``, called before any verl
engine module is imported (``verl.workers.engine.fsdp.transformer_impl`` reads the device name at
import), adds a ``cpu`` platform to verl's ``PlatformRegistry`` (its device module supplies what
``torch.cpu`` lacks) and registers verl's FSDP engines for device ``cpu``, backend ``fsdp2``; the
engine then joins a plain ``gloo`` group. The config side is ``trinity_verl.config.cpu_fields``.
Details: the package README ("On a CPU").
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

PLATFORM = "cpu"


class _CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module."""

    def __init__(self) -> None:
        super().__init__("trinity_verl.cpu.device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    max_memory_reserved = memory_allocated = memory_reserved = max_memory_allocated

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, os.sysconf("SC_PHYS_PAGES") * size

    @staticmethod
    def empty_cache() -> None:
        return None

    reset_peak_memory_stats = synchronize = empty_cache

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def current_device() -> str:
        return PLATFORM

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"


DEVICE = _CpuDeviceModule()


def _platform_class() -> type:
    """verl's platform base is imported only here, when a verl engine is being built."""
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """The host CPU as verl's accelerator: gloo collectives, no IPC, no profiler."""

        device_name = PLATFORM
        vendor_name = PLATFORM
        device_module = DEVICE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return not torch.cuda.is_available()

        def current_device(self) -> str:
            """verl passes this to ``.to()`` and ``torch.device()``: an index would mean an accelerator."""
            return PLATFORM

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "TRINITY_VERL_VISIBLE_CPUS"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        profiler_stop = profiler_start

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def enable_cpu() -> None:
    """Make verl train on the CPU in this process (idempotent). Call before importing verl's engines."""
    os.environ["VERL_PLATFORM"] = PLATFORM  # read by get_platform here and in processes this one starts
    from verl.plugin.platform import PlatformRegistry, get_platform, set_platform

    if PlatformRegistry.get(PLATFORM) is None:
        PlatformRegistry.register(PLATFORM)(_platform_class())
    if get_platform().device_name != PLATFORM:  # verl picked its platform before this call
        set_platform(PlatformRegistry.get(PLATFORM)())

    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        try:
            EngineRegistry.get_engine_cls(model_type, "fsdp2")
        except ValueError:  # none for this device yet (FSDP1, backend "fsdp", needs an accelerator)
            EngineRegistry.register(model_type, backend="fsdp2", device=PLATFORM)(engine)
