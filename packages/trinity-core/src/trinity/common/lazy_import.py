"""Modules imported on first use, for the code ``trinity run``'s driver loads but never runs.

The driver imports the algorithm functions (to check their arguments against their
defaults) and the role classes (to start them as Ray actors), and computes nothing with
them. Importing torch there cost 1.4 s of CPU while Ray started beside it on the same
cores, and the first rollout came about 0.5 s later; only the actors need torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType


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
