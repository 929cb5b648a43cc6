"""The explorer's rollout engines over their life: start, weights in, restart after a crash.

Every engine type of the config resolves before any engine starts, so a typo in an auxiliary
model's fails at once; each engine computes on the CUDA device ``trinity.placement`` gives it.
The weights an engine holds are the version its experiences record, so a restarted engine gets
the newest published ones before it serves again.
"""

from __future__ import annotations

import logging
import threading
import time

from trinity.common.errors import first_line
from trinity.common.files import read_json
from trinity.config.rules import engine_gpus
from trinity.config.schema import Config, InferenceModelConfig
from trinity.job_dir import trainer_meta_path
from trinity.model.engines import EngineCrashed, EngineStartError, RolloutEngine
from trinity.placement import cuda_device, first_devices
from trinity.plugins import Kind, resolve
from trinity.rollout.client import EngineClient
from trinity.synchronizer.explorer_sync import ExplorerSync
from trinity.synchronizer.methods import WeightUpdate
from trinity.synchronizer.signals import TrainerFinished

logger = logging.getLogger(__name__)

MAX_ENGINE_RESTARTS = 3
"""Restarts of crashed rollout engines one explorer allows (all its engines together) before
an engine's crash ends the run."""


class RolloutEngines:
    """The rollout model's engines (``clients``), the auxiliary models' (``auxiliary``), the
    sync method that feeds them and the weights ``version`` they hold."""

    def __init__(self, config: Config, role: str, tells_waits: bool = False):
        self.config = config
        self.role = role
        self.sync = ExplorerSync(config, role if tells_waits else None)  # first: it forgets a crashed wait
        models = config.explorer.inference_models()
        classes = [resolve(Kind.ROLLOUT_ENGINE, model.engine_type, f"{key}.engine_type") for key, model in models]
        firsts = first_devices(config, [(model, cls) for (_, model), cls in zip(models, classes, strict=True)])
        self.clients, *self.auxiliary = [
            self._start(key, model, cls, first)
            for (key, model), cls, first in zip(models, classes, firsts, strict=True)
        ]
        for client in self.clients:  # the checker allows it on a takes_partial_rollout engine only
            client.engine.partial_rollout = self.sync.policy.interrupts_generation
        self.sync.connect(self.clients)
        self.version = 0
        self._restart_lock = threading.Lock()
        self._restarts = 0

    def _start(
        self, key: str, model: InferenceModelConfig, engine_cls: type[RolloutEngine], first_device: int | None
    ) -> list[EngineClient]:
        """``model``'s ``engine_num`` engines, the ``i``-th on this process's CUDA device
        ``first_device + i x its GPUs`` when they compute here; a failure names the model's ``key``."""
        try:
            engines = [model.model_copy(update={"engine_id": i}) for i in range(model.engine_num)]
            clients = []
            for engine in engines:
                device = None if first_device is None else first_device + engine.engine_id * engine_gpus(model)
                with cuda_device(device):
                    clients.append(EngineClient(engine_cls(engine, self.config.model)))
            for client in clients:  # an engine with no endpoint of its own gets trinity's
                if model.enable_openai_api and client.api_url is None:
                    logger.info("%s: OpenAI-compatible endpoint at %s", key, client.serve_openai(model))
            return clients
        except Exception as exc:
            cause = str(exc) if isinstance(exc, EngineStartError) else f"{type(exc).__name__}: {exc}"
            raise EngineStartError(f"{key}: {cause}") from exc

    def resume(self) -> None:
        """A resumed run starts from the trainer's last checkpoint, which it republishes."""
        trainer_meta = read_json(trainer_meta_path(self.config)) if self.config.continue_from_checkpoint else None
        if trainer_meta and trainer_meta["step"] > 0:
            wait = self.config.synchronizer.sync_timeout if self.config.in_one_run else 0
            update = self.sync.fetch(trainer_meta["step"], timeout=wait)
            if update is not None:
                self.load(update)

    def load(self, update: WeightUpdate) -> None:
        """Put a published version into every rollout engine."""
        started = time.perf_counter()
        if not update.loaded:  # else the sync method's fetch has put them in (nccl) and logged its time
            calls = [e.call("update_weights", update.state_dict, update.path, update.version) for e in self.clients]
            for call in calls:
                call.result()
        self.version = update.version
        logger.info(
            "%s: weights of version %d loaded in %.2f s", self.role, update.version, time.perf_counter() - started
        )

    def final_sync(self, step: int) -> None:
        """Wait for the trainer's weights after the last explored ``step`` (mode both)."""
        if self.config.in_one_run and step > self.version:
            try:
                update = self.sync.fetch(step, timeout=self.config.synchronizer.sync_timeout)
            except TrainerFinished as exc:
                update = self.sync.fetch(exc.last_version, timeout=0)  # the last there is
            if update is not None and update.version > self.version:
                self.load(update)

    def restart_crashed(self, crash: EngineCrashed) -> None:
        """Restart every crashed rollout engine and load the newest published weights into it.
        Batches in flight that saw the same crash find the engines back already. ``crash`` ends
        the run when an engine cannot restart, the sync method cannot feed a new engine (nccl),
        or the explorer's ``MAX_ENGINE_RESTARTS`` are used up."""
        what = first_line(crash)
        with self._restart_lock:
            crashed = [client for client in self.clients if client.engine.crashed]
            if not crashed:
                return
            refusal = (
                f"engine_type {self.config.explorer.rollout_model.engine_type!r} cannot restart"
                if not all(client.engine.restartable for client in crashed)
                else f"sync_method {self.config.synchronizer.sync_method!r} cannot feed a restarted engine"
                if not self.sync.feeds_new_engines
                else f"all {MAX_ENGINE_RESTARTS} engine restarts of the run are used"
                if self._restarts + len(crashed) > MAX_ENGINE_RESTARTS
                else None
            )
            if refusal:
                raise EngineCrashed(f"{what} (not restarted: {refusal})") from crash
            update = self.sync.fetch(self.version, timeout=0) if self.version else None
            if self.version and update is None:
                raise EngineCrashed(f"{what} (not restarted: no weights of version {self.version} are published)")
            for client in crashed:
                self._restarts += 1
                logger.warning(
                    "%s: %s; restarting it (restart %d of %d)", self.role, what, self._restarts, MAX_ENGINE_RESTARTS
                )
                client.restart()
                if update is not None:
                    client.call("update_weights", update.state_dict, update.path, update.version).result()
                logger.warning("%s: engine restarted with the weights of version %d", self.role, client.model_version)

    def close(self) -> None:
        for client in [*self.clients, *(c for clients in self.auxiliary for c in clients)]:
            client.close()
