"""The broken mechanism of the sync-style cells' controls: ``dropped_memory``, the ``memory``
sync method except that it passes every version the trainer publishes on to the explorer without
its weights. The explorer counts versions while its rollout engines keep sampling from the initial
model: the stale-weights bug a learning cell must catch (only ``rollout/staleness``, from the
engines' own version, shows it too)."""

from __future__ import annotations

from contextlib import nullcontext

from trinity.plugin_api import Kind, SyncMethod, WeightUpdate, hookimpl, resolve


class DroppedWeights(SyncMethod):
    """``memory``, whose updates reach the explorer as already loaded, with no weights."""

    def __init__(self, config):
        super().__init__(config)
        self.inner = resolve(Kind.SYNC_METHOD, "memory")(config)

    @classmethod
    def shared_actors(cls, config):
        return resolve(Kind.SYNC_METHOD, "memory").shared_actors(config)

    def publish(self, state_dict, version, fence=nullcontext):
        self.inner.publish(state_dict, version, fence)

    def fetch(self, min_version, timeout):
        update = self.inner.fetch(min_version, timeout)
        return update and WeightUpdate(update.version, loaded=True)


@hookimpl
def trinity_register_sync_methods(register):
    register("dropped_memory", f"{__name__}:DroppedWeights")
