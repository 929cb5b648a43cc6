"""Learning tests: each runs a cell of the learning matrix (learning_cells.py) for a short budget
with fixed seeds and asserts its stated margin. The models and data are built once a session."""

from __future__ import annotations

import pytest
from learning_cells import Workspace, plugin_env

from trinity.plugins import manager as plugin_manager


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The tiny model, its SFT warm-up and the cells' data, shared by every learning test."""
    return Workspace(tmp_path_factory.mktemp("learning"))


@pytest.fixture(scope="module")
def learning_plugins():
    """This process's registry loads the learning plugins (tests/learning/plugins) too, for one
    module only: the suites that run after it (tests/plugins) see the installed plugins alone."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in plugin_env().items():
            patch.setenv(key, value)
        patch.setattr(plugin_manager, "_registry", None)  # rebuilt with the plugin directory
        yield
    plugin_manager._registry = None


@pytest.fixture(scope="module")
def learning_ray(learning_plugins):
    """One Ray for a module's runs (each ``trinity.launcher.run`` joins it); its workers load
    the learning plugins, inheriting ``learning_plugins``' variables from this process (a
    ``runtime_env`` would cost about 0.7 s more CPU per actor: Ray's setup_worker)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(include_dashboard=False)
    try:
        yield
    finally:
        ray.shutdown()
