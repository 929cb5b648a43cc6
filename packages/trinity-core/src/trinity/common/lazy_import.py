"""Modules imported on first use, for the code ``trinity run``'s driver loads but never runs.

The driver imports the algorithm functions (to check their arguments against their
defaults) and the role classes (to start them as Ray actors), and computes nothing with
them. Only the actors need torch: imported in the driver it takes CPU from Ray starting
beside it on the same cores, and the first rollout comes later.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class LazyModule(ModuleType):
    """Stands for the module ``name`` and imports it at the first attribute read.

    Each attribute read once is kept on the stand-in, so later reads cost what a module's
    do. A module that uses torch only in annotations imports it under ``TYPE_CHECKING``
    instead.
    """

    def __getattr__(self, attribute: str):
        value = getattr(importlib.import_module(self.__name__), attribute)
        setattr(self, attribute, value)
        return value


def lazy_module(name: str) -> ModuleType:
    """``name``, imported when an attribute of it is first read (``torch = lazy_module("torch")``)."""
    return LazyModule(name)


def module_exists(name: str) -> bool:
    """Whether the module ``name`` (``"pkg.sub.mod"``) can be found, executing no code of it or of
    its parent packages (``importlib.util.find_spec("pkg.sub")`` imports ``pkg``).

    Each level is asked of the finders of ``sys.meta_path`` (installed code, what ``import``
    itself asks) with the search locations of the level above: a package's ``__init__`` is
    located, never run. Modules already imported are taken from ``sys.modules``.
    """
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return False
    if name in sys.modules:  # imported already (``os.path`` too, which no package holds)
        return True
    locations = None
    for depth in range(1, len(parts) + 1):
        qualified = ".".join(parts[:depth])
        module = sys.modules.get(qualified)
        if module is not None:
            found = getattr(module, "__path__", None)
        else:
            spec = _find_spec(qualified, locations)
            if spec is None:
                return False
            found = spec.submodule_search_locations
        if depth < len(parts) and found is None:  # not a package: it has no submodules
            return False
        locations = found
    return True


def _find_spec(name: str, locations: Any) -> ModuleSpec | None:
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, locations)
        except (ImportError, ValueError, TypeError, AttributeError):
            continue
        if spec is not None:
            return spec
    return None


def ray_running() -> bool:
    """Whether this process has joined Ray, importing nothing: a run that never imported Ray
    (``cluster.single_process``) has not; its shared queue and weight store are then local."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
