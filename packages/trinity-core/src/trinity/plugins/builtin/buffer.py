"""trinity-core's buffer storages, task selectors and replay priority functions."""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_buffer_storages(register):
    register("file", "trinity.buffer.storage.file:FileStorage")
    register("queue", "trinity.buffer.storage.queue:QueueStorage")
    register("sql", "trinity.buffer.storage.sql:SQLStorage")


@hookimpl
def trinity_register_task_selectors(register):
    register("sequential", "trinity.buffer.selector:SequentialSelector")
    register("shuffle", "trinity.buffer.selector:ShuffleSelector")
    register("random", "trinity.buffer.selector:RandomSelector")
    register("offline_easy2hard", "trinity.buffer.selector:OfflineEasy2HardSelector")
    register("difficulty_based", "trinity.buffer.selector:DifficultyBasedSelector")


@hookimpl
def trinity_register_priority_fns(register):
    register("linear_decay", "trinity.buffer.priority:LinearDecay")
    register("decay_limit_randomization", "trinity.buffer.priority:DecayLimitRandomization")
