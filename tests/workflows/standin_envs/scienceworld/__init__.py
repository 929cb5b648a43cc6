"""Stand-in for ScienceWorld: the jar path is the game's script; rewards are score changes."""

from scripted import ScriptedGymEnv


class ScienceWorldEnv(ScriptedGymEnv):
    def __init__(self, task_name, jar_path, envStepLimit):  # noqa: N803 -- ScienceWorld's name
        super().__init__(jar_path)

    def load(self, task_name, var_num, simplification, generateGoldPath=False):  # noqa: N803
        self.task = f"{task_name} (variation {var_num}, {simplification})"

    def get_gold_action_sequence(self):
        return ["look around", "focus on thermometer", "wait"]

    def get_task_description(self):
        return self.task
