"""The hooks trinity calls at start-up: they register names, and import nothing heavy.

Targets are ``"module:attribute"`` strings, imported only when a config names them.
"""

from trinity.plugins import hookimpl


@hookimpl
def trinity_register_workflows(register):
    register("reverse_text_workflow", "trinity_plugin_example.workflow:ReverseTextWorkflow")


@hookimpl
def trinity_register_reward_fns(register):
    register("reverse_text_reward", "trinity_plugin_example.reward:reverse_text_reward")
