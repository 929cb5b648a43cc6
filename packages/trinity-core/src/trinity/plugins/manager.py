"""Discover plugins, keep the name -> implementation tables, resolve config names.

The core's own plugin modules and third-party ones are found the same way, through the ``trinity``
entry-point group, filtered by ``TRINITY_DISABLE_PLUGINS`` and ``TRINITY_PLUGINS_ALLOWLIST``
(comma-separated entry-point or distribution names; trinity-core is always allowed). Every
``*.py`` file in the directories of ``TRINITY_PLUGIN_DIRS`` (``os.pathsep``-separated; the CLI's
``--plugin-dir``) is a plugin module too, owned by ``local:<dir>``. A plugin that fails to import
is reported with its distribution and error, and the others keep working.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

import pluggy

from trinity.common.errors import PicklableError
from trinity.common.lazy_import import module_exists
from trinity.plugins import hookspecs
from trinity.plugins.kinds import KNOWN_PROVIDERS, Kind, sibling_distribution

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "trinity"
CORE_DISTRIBUTION = "trinity-core"
DISABLE_ENV = "TRINITY_DISABLE_PLUGINS"
ALLOWLIST_ENV = "TRINITY_PLUGINS_ALLOWLIST"
PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"


class PluginError(PicklableError):
    """Base class of the plugin system's errors."""


class DuplicatePluginError(PluginError):
    """Two plugins registered the same name for one kind."""


class UnknownPluginError(PluginError, LookupError):
    """A config named something no installed plugin provides.

    Carries the kind, the name, the installed names, the nearest match and, where a
    known sibling distribution provides the name, the extra to install.
    """

    def __init__(self, kind: Kind, name: str, installed: list[str], config_key: str | None = None):
        self.kind = kind
        self.name = name
        self.installed = sorted(installed)
        close = difflib.get_close_matches(name, self.installed, n=1, cutoff=0.6)
        self.suggestion = close[0] if close else None
        self.extra = KNOWN_PROVIDERS.get((kind, name))
        self.config_key = config_key
        super().__init__(self._message())

    def _message(self) -> str:
        subject = self.config_key or self.kind.label
        if self.extra:
            dist = sibling_distribution(self.extra)
            text = (
                f"{subject} '{self.name}' is provided by {dist}, which is not installed: "
                f'pip install "trinity-core[{self.extra}]"'
            )
        else:
            text = f"unknown {self.kind.label} '{self.name}'"
            if self.suggestion:
                text += f"; did you mean '{self.suggestion}'?"
        installed = ", ".join(self.installed) or "none"
        return f"{text} (installed {self.kind.label}s: {installed})"


@dataclass(frozen=True)
class PluginEntry:
    """One registered name: where it points and who registered it."""

    kind: Kind
    name: str
    target: Any
    plugin: str
    distribution: str

    @property
    def target_path(self) -> str:
        if isinstance(self.target, str):
            return self.target
        return f"{self.target.__module__}:{getattr(self.target, '__qualname__', repr(self.target))}"


@dataclass
class LoadFailure:
    """A plugin that could not be imported or whose hooks raised."""

    plugin: str
    distribution: str
    error: str


def _split_env(var: str) -> set[str]:
    return {item.strip() for item in os.environ.get(var, "").split(",") if item.strip()}


def import_target(path: str) -> Any:
    """Import ``"package.module:attribute"`` (or ``"package.module.attribute"``)."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class PluginRegistry:
    """The tables of every kind, filled by running each plugin's registration hooks."""

    entries: dict[Kind, dict[str, PluginEntry]] = field(default_factory=lambda: {k: {} for k in Kind})
    failures: list[LoadFailure] = field(default_factory=list)
    hooks: Any = None
    """The plugin manager's hook caller (``hooks.trinity_check_config(...)``)."""
    _loaded: dict[tuple[Kind, str], Any] = field(default_factory=dict)

    def add(self, kind: Kind, name: str, target: Any, plugin: str, distribution: str) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"plugin {plugin} ({distribution}) registered a {kind.label} with an empty or non-string name"
            )
        existing = self.entries[kind].get(name)
        if existing is not None:
            raise DuplicatePluginError(
                f"{kind.label} '{name}' is registered twice: by plugin {existing.plugin} "
                f"({existing.distribution}, {existing.target_path}) and by plugin {plugin} "
                f"({distribution}); disable one with {DISABLE_ENV}"
            )
        self.entries[kind][name] = PluginEntry(kind, name, target, plugin, distribution)

    def names(self, kind: Kind) -> list[str]:
        return sorted(self.entries[kind])

    def entry(self, kind: Kind, name: str, config_key: str | None = None) -> PluginEntry:
        """The entry of ``name``; an unregistered dotted ``package.module.Class`` whose module
        exists is an entry of its own (as Trinity-RFT accepts), found without importing it."""
        if name in self.entries[kind]:
            return self.entries[kind][name]
        module = name.rpartition(".")[0] if "." in name and ":" not in name else ""
        if module and module_exists(module):
            return PluginEntry(kind, name, name, plugin="dotted path", distribution="(import path)")
        raise UnknownPluginError(kind, name, self.names(kind), config_key)

    def check(self, kind: Kind, name: str, config_key: str | None = None) -> None:
        """Raise UnknownPluginError unless ``name`` is registered; imports nothing."""
        self.entry(kind, name, config_key)

    def resolve(self, kind: Kind, name: str, config_key: str | None = None) -> Any:
        """The implementation registered as ``name``, importing it on first use."""
        key = (kind, name)
        if key not in self._loaded:
            entry = self.entry(kind, name, config_key)
            target = entry.target
            if isinstance(target, str):
                try:
                    target = import_target(target)
                except Exception as exc:
                    raise PluginError(
                        f"{kind.label} '{name}' from {entry.distribution} points to {entry.target_path}, "
                        f"which cannot be imported: {type(exc).__name__}: {exc}"
                    ) from exc
            self._loaded[key] = target
        return self._loaded[key]

    def all_entries(self) -> Iterable[PluginEntry]:
        for kind in Kind:
            for name in self.names(kind):
                yield self.entries[kind][name]


def _entry_point_allowed(ep_name: str, dist: str, disabled: set[str], allowed: set[str]) -> bool:
    if ep_name in disabled or dist in disabled:
        return False
    if allowed and dist != CORE_DISTRIBUTION:
        return ep_name in allowed or dist in allowed
    return True


def _load_plugin_dirs(failures: list[LoadFailure]) -> list[tuple[str, ModuleType, str]]:
    """Import the ``*.py`` files of ``TRINITY_PLUGIN_DIRS``: ``(plugin name, module, distribution)``.

    Each directory goes on ``sys.path`` and each file is imported under its own name, so
    ``"my_file:MyWorkflow"`` targets resolve and classes pickle by reference in worker
    processes that got the same variable. A file that fails to import, or whose name an
    installed module already takes, is a load failure; the others still load.
    """
    loaded = []
    for directory in filter(None, os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep)):
        root = os.path.abspath(directory)
        dist = f"local:{root}"
        if not os.path.isdir(root):
            failures.append(LoadFailure(root, dist, f"{PLUGIN_DIRS_ENV} names a directory that does not exist"))
            continue
        if root not in sys.path:
            sys.path.insert(0, root)
        for file in sorted(f for f in os.listdir(root) if f.endswith(".py") and not f.startswith("_")):
            path, module_name = os.path.join(root, file), file[:-3]
            try:
                module = importlib.import_module(module_name)
                if os.path.abspath(getattr(module, "__file__", "") or "") != path:
                    raise ImportError(f"the module name '{module_name}' is taken by {module.__file__}; rename the file")
            except Exception as exc:
                failures.append(LoadFailure(path, dist, f"{type(exc).__name__}: {exc}"))
                logger.warning("plugin file %s failed to load: %s: %s", path, type(exc).__name__, exc)
                continue
            loaded.append((path, module, dist))
    return loaded


def build_registry(extra_plugins: Iterable[tuple[str, ModuleType | object]] = ()) -> PluginRegistry:
    """Load every allowed ``trinity`` entry point (and ``extra_plugins``), run their hooks.

    ``extra_plugins`` are ``(name, module)`` pairs registered as if found through an
    entry point; the owning distribution is reported as ``local``.
    """
    pm = pluggy.PluginManager("trinity")
    pm.add_hookspecs(hookspecs)
    registry = PluginRegistry()
    disabled, allowed = _split_env(DISABLE_ENV), _split_env(ALLOWLIST_ENV)
    owners: dict[str, str] = {}

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.dist.name if e.dist else "", e.name)):
        dist = ep.dist.name if ep.dist else "unknown"
        if not _entry_point_allowed(ep.name, dist, disabled, allowed):
            logger.info("plugin %s (%s) not loaded: blocked by %s/%s", ep.name, dist, DISABLE_ENV, ALLOWLIST_ENV)
            continue
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
        except Exception as exc:  # a broken plugin must not take the others down
            registry.failures.append(LoadFailure(ep.name, dist, f"{type(exc).__name__}: {exc}"))
            logger.warning("plugin %s from %s failed to load: %s: %s", ep.name, dist, type(exc).__name__, exc)
            continue
        owners[ep.name] = dist
    for name, module in extra_plugins:
        pm.register(module, name=name)
        owners[name] = "local"
    for name, module, dist in _load_plugin_dirs(registry.failures):
        pm.register(module, name=name)
        owners[name] = dist

    _refuse_unknown_hooks(pm, owners, registry.failures)
    registry.hooks = pm.hook
    for kind in Kind:
        caller = getattr(pm.hook, kind.hook_name)
        for impl in caller.get_hookimpls():  # in registration order
            plugin, dist = impl.plugin_name, owners.get(impl.plugin_name, "unknown")

            def register(name: str, target: Any, _kind=kind, _plugin=plugin, _dist=dist) -> None:
                registry.add(_kind, name, target, _plugin, _dist)

            try:
                impl.function(register=register)
            except DuplicatePluginError:
                raise
            except Exception as exc:
                registry.failures.append(LoadFailure(plugin, dist, f"{kind.hook_name}: {type(exc).__name__}: {exc}"))
                logger.warning("plugin %s from %s failed in %s: %s", plugin, dist, kind.hook_name, exc)
    return registry


def _refuse_unknown_hooks(pm: pluggy.PluginManager, owners: dict[str, str], failures: list[LoadFailure]) -> None:
    """A plugin implementing a hook that no spec declares (a misspelt name) is a load failure:
    it is unregistered, with the unknown hook named, and the others keep working."""
    while True:
        try:
            pm.check_pending()
            return
        except pluggy.PluginValidationError as exc:
            name = pm.get_name(exc.plugin) or "unknown"
            failures.append(LoadFailure(name, owners.get(name, "unknown"), f"{exc}; see trinity.plugins.hookspecs"))
            logger.warning("plugin %s not loaded: %s", name, exc)
            pm.unregister(exc.plugin)


_registry: PluginRegistry | None = None


def get_registry() -> PluginRegistry:
    """The process-wide registry, built on first use."""
    global _registry
    if _registry is None:
        _registry = build_registry()
    return _registry


def plugin_hooks() -> Any:
    """The hook caller of every loaded plugin (for hooks other than registration)."""
    return get_registry().hooks


def resolve(kind: Kind, name: str, config_key: str | None = None) -> Any:
    """Shortcut for ``get_registry().resolve(kind, name)``."""
    return get_registry().resolve(kind, name, config_key)
