"""The game every stand-in library plays: a JSON script, and a log of the actions it received.

Script keys: ``intro`` (first observation), ``rewards`` (the reward of each step in turn; the
game is done after the last), ``log`` (a file each received action is appended to, one JSON
string a line).
"""

import json
from pathlib import Path


class ScriptedGame:
    def __init__(self, script_path):
        self.script = json.loads(Path(script_path).read_text())
        self.steps = 0

    def reset(self):
        self.steps = 0
        return self.script["intro"]

    def step(self, action):
        with open(self.script["log"], "a") as log:
            log.write(json.dumps(action) + "\n")
        reward = self.script["rewards"][self.steps]
        self.steps += 1
        done = self.steps == len(self.script["rewards"])
        return f"You did: {action}. Nothing happens.", reward, done


class ScriptedGymEnv:
    """The game behind a gym-style interface: ``reset() -> (obs, info)``, 4-tuple steps."""

    def __init__(self, script_path):
        self.game, self.closed = ScriptedGame(script_path), False

    def reset(self):
        return self.game.reset(), {}

    def step(self, action):
        observation, reward, done = self.game.step(action)
        return observation, reward, done, {}

    def close(self):
        self.closed = True
