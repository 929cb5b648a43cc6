"""trinity-core's weight synchronisation methods."""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_sync_methods(register):
    register("checkpoint", "trinity.synchronizer.methods:CheckpointSync")
    register("memory", "trinity.synchronizer.methods:MemorySync")
