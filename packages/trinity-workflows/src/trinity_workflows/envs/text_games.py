"""Text-game environments: ALFWorld, ScienceWorld, WebShop (Trinity-RFT's workflows and rules).

The model thinks in ``<think>...</think>`` and acts with ``<action>...</action>``; the row's prompt
column (``format.prompt_key``, Trinity-RFT's ``task_desc``) names the episode: an ALFWorld game file
(``alfworld_workflow``, ``step_wise_alfworld_workflow``, whose steps carry GiGPO's
``env_state_hash`` and ``step_reward``), a ScienceWorld task (``sciworld_workflow``) or a WebShop
session (``webshop_workflow``). Their libraries are not on PyPI in a usable form; each is imported
on first use and a missing one says where to get it. Rewards: the package README.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, ClassVar

from trinity.plugin_api import Experience, Field
from trinity_workflows.base import require
from trinity_workflows.conversation import MultiTurnWorkflow, StepWiseWorkflow
from trinity_workflows.envs.base import EnvArgs, EnvironmentWorkflow, EpisodeRecord

ACT_FORMAT = """Each step, think first and then act: wrap your thinking in <think> </think> and \
your one action in <action> </action>, e.g. <think>...</think><action>{example}</action>.
Do not ask the user anything; finish the task on your own."""

ALFWORLD_PROMPT = f"""You are an agent in a text-based household. Complete the task you are given.

Commands: look; inventory; go to (receptacle); open (receptacle); close (receptacle); \
take (object) from (receptacle); move (object) to (receptacle); examine (something); use (object); \
heat (object) with (receptacle); clean (object) with (receptacle); cool (object) with (receptacle); \
slice (object) with (object). You can hold one object at a time.

{ACT_FORMAT.format(example="go to cabinet 1")}"""

SCIWORLD_PROMPT = f"""You are an agent running a science experiment in a text-based world.

Commands: open/close OBJ; activate/deactivate OBJ; connect OBJ to OBJ; disconnect OBJ; \
use OBJ [on OBJ]; look around; examine OBJ; look at OBJ; read OBJ; move OBJ to OBJ; pick up OBJ; \
pour OBJ into OBJ; mix OBJ; teleport to LOC; focus on OBJ; wait; wait1.

{ACT_FORMAT.format(example="teleport to kitchen")}"""

WEBSHOP_PROMPT = f"""You are shopping on a text-based web store: buy the item that best matches \
the instruction, within 15 steps.

Actions: search[query] when the page has a [button] Search [button_]; click[name] for any \
[button] name [button_] on the current page.

{ACT_FORMAT.format(example="search[white shoes]")}"""

ALFWORLD_INSTALL = (
    "pip install alfworld, then fetch its data with alfworld-download (https://github.com/alfworld/alfworld)"
)
SCIWORLD_INSTALL = "pip install scienceworld (needs Java; https://github.com/allenai/ScienceWorld)"
WEBSHOP_INSTALL = "install WebShop's web_agent_site and gym from https://github.com/princeton-nlp/WebShop"
UNFINISHED = -0.1
"""The reward of an ALFWorld or WebShop episode that ends without a win or a purchase."""


class GymEpisode:
    """A gym-style text environment (``reset() -> (obs, info)``, ``step -> (obs, reward, done, info)``)."""

    def __init__(self, env: Any):
        self.env = env

    def reset(self) -> str:
        observation, _ = self.env.reset()
        return str(observation)

    def step(self, action: str) -> tuple[str, float, bool]:
        observation, reward, done, _ = self.env.step(action)
        return str(observation), float(reward), bool(done)

    def close(self) -> None:
        self.env.close()


def won_or_unfinished(record: EpisodeRecord) -> float:
    """The last step's reward if the episode finished, else ``UNFINISHED``."""
    return record.rewards[-1] if record.done else UNFINISHED


class AlfworldGame(EnvironmentWorkflow):
    """An ALFWorld game (TextWorld with ALFWorld's wrappers) and its reward rule."""

    env_system_prompt = ALFWORLD_PROMPT

    def open_episode(self) -> GymEpisode:
        textworld = require("textworld", ALFWORLD_INSTALL)
        tw_gym = require("textworld.gym", ALFWORLD_INSTALL)
        alfred = require("alfworld.agents.environment.alfred_tw_env", ALFWORLD_INSTALL)
        infos = textworld.EnvInfos(description=True, inventory=True, admissible_commands=True)
        wrappers = [alfred.AlfredDemangler(), alfred.AlfredExpert(expert_type=alfred.AlfredExpertType.HANDCODED)]
        env_id = tw_gym.register_game(self.task_desc, infos, wrappers=wrappers)
        return GymEpisode(tw_gym.make(env_id))

    def format_observation(self, observation: str) -> str:
        if "Nothing happens." in observation:
            observation += " Check that your action is one of the commands, in the format asked for."
        return f"Observation: {observation}"

    def episode_reward(self, record: EpisodeRecord) -> float:
        return won_or_unfinished(record)


class AlfworldWorkflow(AlfworldGame, MultiTurnWorkflow):
    """An ALFWorld game as one multi-turn experience."""


class StepWiseAlfworldWorkflow(AlfworldGame, StepWiseWorkflow):
    """ALFWorld with one experience per step (GiGPO-ready, see the module doc)."""

    def annotate(self, experiences: list[Experience], record: EpisodeRecord) -> list[Experience]:
        for experience, observation, reward in zip(experiences, record.observations, record.rewards, strict=True):
            experience.info["env_state_hash"] = hashlib.sha256(observation.encode()).hexdigest()
            experience.info["step_reward"] = reward
        return experiences


class ScienceWorldEpisode:
    """ScienceWorld on one task variation; the first observation leads with the task."""

    def __init__(self, task: dict[str, Any]):
        scienceworld = require("scienceworld", SCIWORLD_INSTALL)
        self.env = scienceworld.ScienceWorldEnv("", task["jar_path"], envStepLimit=100)
        self.env.load(task["task_name"], task["var_num"], "easy", generateGoldPath=True)
        self.golden_steps = len(self.env.get_gold_action_sequence())

    def reset(self) -> str:
        observation, _ = self.env.reset()
        return f"Task Description: {self.env.get_task_description()}\n{observation}"

    def step(self, action: str) -> tuple[str, float, bool]:
        observation, reward, done, _ = self.env.step(action)
        return str(observation), float(reward), bool(done)

    def close(self) -> None:
        self.env.close()


class SciWorldWorkflow(EnvironmentWorkflow, MultiTurnWorkflow):
    """A ScienceWorld task as one multi-turn experience; metric ``golden_steps``."""

    env_system_prompt = SCIWORLD_PROMPT

    def open_episode(self) -> ScienceWorldEpisode:
        try:
            task = json.loads(self.task_desc)
            missing = {"task_name", "var_num", "jar_path"} - set(task)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"a sciworld row's prompt must be JSON with task_name, var_num, jar_path: {exc}") from exc
        if missing:
            raise ValueError(f"the sciworld task {self.task_desc!r} lacks {sorted(missing)}")
        self.episode = ScienceWorldEpisode(task)
        return self.episode

    def format_observation(self, observation: str) -> str:
        return f"Observation:\n{observation}"

    def episode_reward(self, record: EpisodeRecord) -> float:
        best = total = 0.0
        for reward in record.rewards:
            total += reward
            best = max(best, total)
        return best / 100.0

    def annotate(self, experiences: list[Experience], record: EpisodeRecord) -> list[Experience]:
        for experience in experiences:
            experience.metrics["golden_steps"] = float(self.episode.golden_steps)
        return experiences


_CLICK_OR_SEARCH = re.compile(r"(.+?)\[(.*)\]$", re.DOTALL)


def check_webshop_action(action: str, available: dict[str, Any]) -> str | None:
    """Why ``action`` cannot be taken on the page (``available`` as WebShop describes it), or None."""
    match = _CLICK_OR_SEARCH.match(action.strip())
    name, argument = (match.group(1).strip(), match.group(2).strip().lower()) if match else (action.strip(), None)
    clickables = available.get("clickables", [])
    if name == "search":
        if not argument:
            return "Invalid action: put the query in the brackets, e.g. search[white shoes]."
        if not available.get("has_search_bar"):
            return "There is no search bar on this page: click Back to Search first."
        return None
    if name == "click":
        if argument in clickables:
            return None
        return f"There is no button '{argument}' on this page. The buttons are: {clickables}"
    return "Invalid action: wrap search[...] or click[...] in <action> </action>."


@functools.cache
def webshop_env() -> Any:
    """The WebShop text environment, one per process (it holds the product catalogue in memory)."""
    gym = require("gym", WEBSHOP_INSTALL)
    require("web_agent_site.envs", WEBSHOP_INSTALL)  # registers WebAgentTextEnv-v0
    return gym.make("WebAgentTextEnv-v0", observation_mode="text_rich", num_products=None, human_goals=True)


class WebShopEpisode:
    """One WebShop session; invalid actions are answered without stepping the environment."""

    def __init__(self, env: Any, session: int):
        self.env, self.session = env, session

    def reset(self) -> str:
        self.env.reset(session=self.session)
        return str(self.env.observation)

    def step(self, action: str) -> tuple[str, float, bool]:
        problem = check_webshop_action(action, self.env.get_available_actions())
        if problem:
            return problem, 0.0, False
        observation, reward, done, _ = self.env.step(action)
        return str(observation), float(reward), bool(done)

    def close(self) -> None:
        """The environment is shared by the process's episodes: it stays open."""


class WebShopArgs(EnvArgs):
    max_env_steps: int = Field(15, ge=1, description="most model actions per episode")


class WebShopWorkflow(EnvironmentWorkflow, MultiTurnWorkflow):
    """A WebShop session as one multi-turn experience."""

    Args: ClassVar[type[EnvArgs]] = WebShopArgs
    env_system_prompt = WEBSHOP_PROMPT

    def open_episode(self) -> WebShopEpisode:
        try:
            session = int(self.task_desc)
        except ValueError as exc:
            raise ValueError(f"a webshop row's prompt must be a session id (an integer): {exc}") from exc
        return WebShopEpisode(webshop_env(), session)

    def episode_reward(self, record: EpisodeRecord) -> float:
        return won_or_unfinished(record)
