"""Stand-in for WebShop's text environment: sessions are script files under $WEBSHOP_SCRIPTS."""

import os

import gym
from scripted import ScriptedGame


class WebAgentTextEnv:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def reset(self, session):
        self.game = ScriptedGame(os.path.join(os.environ["WEBSHOP_SCRIPTS"], f"{session}.json"))
        self.observation = self.game.reset()

    def get_available_actions(self):
        return {"has_search_bar": self.game.steps == 0, "clickables": ["buy now", "back to search"]}

    def step(self, action):
        self.observation, reward, done = self.game.step(action)
        return self.observation, reward, done, {}


gym.registry["WebAgentTextEnv-v0"] = WebAgentTextEnv
