"""A rollout engine plugin whose process "dies": the transformers engine, made to raise
``EngineCrashed`` as a dead engine actor does (vLLM's, when its Ray actor dies) and to come back
with its initial weights on ``restart``, as a new process would."""

from __future__ import annotations

from trinity.model.engines import EngineCrashed
from trinity.rollout.transformers_rollout import TransformersRolloutEngine


class CrashingEngine(TransformersRolloutEngine):
    """Its next ``crashes`` requests (all instances together) find the process dead."""

    restartable = True
    crashes = 0
    restarts = 0

    def _request(self) -> None:
        if self.crashed or CrashingEngine.crashes > 0:
            CrashingEngine.crashes = max(CrashingEngine.crashes - 1, 0)
            self.crashed = True
            raise EngineCrashed("crashing engine: its process died")

    def generate(self, prompts, args):
        self._request()
        return super().generate(prompts, args)

    def chat(self, conversations, args):
        self._request()
        return super().chat(conversations, args)

    def restart(self) -> None:
        CrashingEngine.restarts += 1
        self.__init__(self.config, self.model_config)
        self.crashed = False


class UnrestartableEngine(CrashingEngine):
    restartable = False
