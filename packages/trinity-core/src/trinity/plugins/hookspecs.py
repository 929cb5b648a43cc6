"""The hooks a trinity plugin implements: one registration hook per kind.

Every hook runs once, when the plugin manager is first used, and receives a ``register(name,
target)`` callback; ``target`` is the implementation or a dotted path ``"package.module:attribute"``
imported only when a config names it, so discovery never imports torch, vllm or verl. A plugin is
a module of functions named after these specs, marked with ``trinity.plugins.hookimpl`` and exposed
through the ``trinity`` entry-point group (``my_plugin = "my_package.plugin"`` under
``[project.entry-points.trinity]``). Hooks return nothing; a name registered twice is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("trinity")

Register = Callable[[str, Any], None]
"""``register(name, target)``: target is an object or a ``"module:attribute"`` path."""


@hookspec
def trinity_register_workflows(register: Register) -> None:
    """Register workflows: classes that turn a Task into Experiences (``default_workflow_type``)."""


@hookspec
def trinity_register_reward_fns(register: Register) -> None:
    """Register reward functions: callables that score a response (``default_reward_fn_type``)."""


@hookspec
def trinity_register_advantage_fns(register: Register) -> None:
    """Register advantage functions (``algorithm.advantage_fn``)."""


@hookspec
def trinity_register_policy_loss_fns(register: Register) -> None:
    """Register policy losses (``algorithm.policy_loss_fn``)."""


@hookspec
def trinity_register_kl_fns(register: Register) -> None:
    """Register KL functions, used both as reward penalty and as loss (``kl_penalty_fn``, ``kl_loss_fn``)."""


@hookspec
def trinity_register_entropy_loss_fns(register: Register) -> None:
    """Register entropy losses (``algorithm.entropy_loss_fn``)."""


@hookspec
def trinity_register_sample_strategies(register: Register) -> None:
    """Register trainer-side sample strategies (``algorithm.sample_strategy``)."""


@hookspec
def trinity_register_algorithm_types(register: Register) -> None:
    """Register algorithm types, which set defaults for the functions above (``algorithm.algorithm_type``)."""


@hookspec
def trinity_register_monitors(register: Register) -> None:
    """Register metric monitors (``monitor.monitor_type``)."""


@hookspec
def trinity_register_buffer_storages(register: Register) -> None:
    """Register buffer storages (``storage_type`` of tasksets and experience buffers)."""


@hookspec
def trinity_register_task_selectors(register: Register) -> None:
    """Register taskset selectors (``task_selector.selector_type``)."""


@hookspec
def trinity_register_priority_fns(register: Register) -> None:
    """Register replay-buffer priority functions (``replay_buffer.priority_fn``)."""


@hookspec
def trinity_register_sync_methods(register: Register) -> None:
    """Register weight synchronisation methods (``synchronizer.sync_method``)."""


@hookspec
def trinity_register_rollout_engines(register: Register) -> None:
    """Register rollout (inference) engines (``explorer.rollout_model.engine_type``)."""


@hookspec
def trinity_register_trainer_engines(register: Register) -> None:
    """Register training engines (``trainer.trainer_type``)."""


@hookspec
def trinity_register_experience_operators(register: Register) -> None:
    """Register experience operators of the data processor (``data_processor.*.operators[].name``)."""


@hookspec
def trinity_config_defaults(config: Any, issues: Any) -> None:
    """Fill the unset values of a config that this plugin owns (e.g. the default sync method of
    its engine, the workflow of tasksets that name none).

    Called by the check pass after the cluster and the models are derived, before the
    synchronizer and the buffers are. ``config`` is a ``trinity.config.schema.Config``,
    ``issues`` an ``IssueCollector`` (say what was filled with ``issues.warn``).
    """


@hookspec
def trinity_check_config(config: Any, issues: Any) -> None:
    """Check the settings of a fully derived config that name this plugin's implementations.

    Called last by the check pass of ``trinity config check`` and ``trinity run``. Report
    problems with ``issues.add(dotted_key, message)`` or ``issues.warn``; never raise.
    """
