"""trinity-core's console monitor (also writes every logged dict to a JSONL file)."""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_monitors(register):
    register("console", "trinity.monitor.console:ConsoleMonitor")
