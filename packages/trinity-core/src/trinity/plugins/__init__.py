"""The plugin system: hook specs, the registry and name resolution."""

import pluggy

from trinity.plugins.kinds import Kind
from trinity.plugins.manager import (
    DuplicatePluginError,
    PluginError,
    UnknownPluginError,
    get_registry,
    resolve,
)

hookimpl = pluggy.HookimplMarker("trinity")
"""Mark a plugin module's function as the implementation of a hook in ``hookspecs``."""

__all__ = [
    "DuplicatePluginError",
    "Kind",
    "PluginError",
    "UnknownPluginError",
    "get_registry",
    "hookimpl",
    "resolve",
]
