"""Environment workflows: FrozenLake (gymnasium) and sudoku for real; ALFWorld, ScienceWorld and
WebShop against stand-in libraries of the same interface (``standin_envs/``), all with the tiny model."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from helpers.engine_helpers import transformers_client
from trinity.common.experience import Task
from trinity.config.check import plugin_args
from trinity.config.load import IssueCollector
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import SamplingArgs
from trinity.plugins import Kind, resolve
from trinity.rollout.model_wrapper import ModelWrapper
from trinity_workflows.base import WorkflowError
from trinity_workflows.envs.base import action_in_tags
from trinity_workflows.envs.frozen_lake import FrozenLakeEpisode, generate_map, parse_move, shortest_moves
from trinity_workflows.envs.sudoku import SudokuGame
from trinity_workflows.envs.text_games import WebShopEpisode, check_webshop_action

STANDINS = Path(__file__).parent / "standin_envs"
STANDIN_MODULES = ("scripted", "textworld", "alfworld", "scienceworld", "gym", "web_agent_site")


@pytest.fixture
def standin_envs(monkeypatch):
    """The stand-in libraries importable for one test, forgotten afterwards."""
    monkeypatch.syspath_prepend(str(STANDINS))
    yield
    for name in list(sys.modules):
        if name.split(".")[0] in STANDIN_MODULES:
            del sys.modules[name]
    from trinity_workflows.envs.text_games import webshop_env

    webshop_env.cache_clear()


def script(tmp_path: Path, rewards: list[float], name: str = "game.json") -> tuple[Path, Path]:
    """A stand-in game's script and the log of the actions it will receive."""
    log = tmp_path / f"{name}.log"
    path = tmp_path / name
    path.write_text(json.dumps({"intro": "You are in a kitchen.", "rewards": rewards, "log": str(log)}))
    return path, log


def received(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# --- FrozenLake ---------------------------------------------------------------------------


def test_generated_maps_are_reproducible_and_solvable_within_the_step_limit():
    for seed in range(20):
        desc = generate_map(4, 0.6, seed, max_steps=3)
        assert desc == generate_map(4, 0.6, seed, max_steps=3)
        assert sum(row.count("S") for row in desc) == sum(row.count("G") for row in desc) == 1
        assert len(shortest_moves(desc)) <= 3
    with pytest.raises(ValueError, match="size >= 2"):
        generate_map(1, 0.8, 0, 5)


@pytest.mark.parametrize(
    ("reply", "move"),
    [("I go ```Right```", 2), ("```up``` no, ```Down```", 1), ("```3```", 2), ("Left", None), ("```jump```", None)],
)
def test_moves_are_read_from_the_last_code_span(reply, move):
    assert parse_move(reply) == move


def test_shortest_moves_walk_around_holes():
    assert shortest_moves(["SFH", "HFF", "HFG"]) == ["Right", "Down", "Down", "Right"]
    assert shortest_moves(["SH", "HG"]) is None


def test_the_frozen_lake_episode_pays_1_at_the_goal_and_0_in_a_hole():
    episode = FrozenLakeEpisode(["SFH", "FFF", "HFG"], is_slippery=False, max_moves=6, seed=0)
    assert episode.reset().splitlines()[1] == "P _ O"
    observation, reward, done = episode.step("```Left```")  # into the wall: no move
    assert (reward, done) == (0.0, False) and "did not move you" in observation
    assert episode.step("hmm")[1:] == (0.0, False)
    for move in ("Right", "Down", "Down"):
        assert episode.step(f"```{move}```")[1:] == (0.0, False)
    observation, reward, done = episode.step("```Right```")
    assert (reward, done) == (1.0, True) and observation.splitlines()[3] == "O _ √"
    episode.reset()
    assert episode.step("```Down```")[1:] == (0.0, False)
    assert episode.step("```Down```")[1:] == (0.0, True)  # the hole


def test_frozen_lake_workflow_plays_an_episode_with_the_tiny_model(make_workflow):
    workflow = make_workflow(
        "frozen_lake_workflow", {"size": 3, "p": 0.9, "seed": 7}, workflow_args={"agent_max_steps": 3}
    )
    (experience,) = workflow.run()
    steps = int(experience.metrics["env_steps"])
    assert 1 <= steps <= 3 and experience.reward == experience.metrics["env_reward"] in (0.0, 1.0)
    users = [m["content"] for m in experience.messages if m["role"] == "user"]
    assert len(users) == steps and users[0].startswith("Observation after 0 moves:")
    assert experience.messages[0]["content"].startswith("You are an agent on a frozen lake")
    assert experience.action_mask.sum() > 0 and len(experience.logprobs) == len(experience.action_mask)


def play_frozen_lake(model_dir: Path, max_prompt_tokens: int):
    """One frozen_lake_workflow episode (3 moves at most) under ``max_prompt_tokens``."""
    config = ModelConfig(model_path=str(model_dir), max_prompt_tokens=max_prompt_tokens)
    with transformers_client(InferenceModelConfig(model_path=str(model_dir)), config) as client:
        model = ModelWrapper(client, SamplingArgs(max_tokens=8))
        raw = {"size": 3, "p": 0.9, "seed": 7}
        task = Task(
            workflow_type="frozen_lake_workflow", raw=raw, taskset_name="t", workflow_args={"agent_max_steps": 3}
        )
        (experience,) = resolve(Kind.WORKFLOW, "frozen_lake_workflow")(task, model).run()
    return experience


def test_an_episode_that_outgrows_max_prompt_tokens_counts_as_a_truncated_prompt(tiny_model_dir):
    """As a conversation (test_conversation.py): the episode ends at the move whose prompt is over
    the limit, and its experience is counted (``rollout/truncated_prompts``, the explorer's warning)."""
    whole = play_frozen_lake(tiny_model_dir, 4096)
    assert whole.truncate_status != "prompt_truncated" and whole.metrics["env_steps"] > 1
    cut = play_frozen_lake(tiny_model_dir, whole.prompt_length + 4)  # the first prompt fits, the second not
    assert cut.metrics["env_steps"] == 1
    assert cut.truncate_status == "prompt_truncated"
    assert cut.info["truncated_from"] > whole.prompt_length + 4 and cut.action_mask.any()


# --- sudoku -------------------------------------------------------------------------------


def test_sudoku_rules():
    game = SudokuGame([[1, 2, 0, 4], [0, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]], SOLUTION)
    assert game.parse_moves("0 2 3\n\n 1 0 3 ", most=5) == [(0, 2, 3), (1, 0, 3)]
    for bad in ("0 2", "0 2 x", "0 4 1", "0 0 5", "", "0 2 3\n1 0 3", "place 0 2 3"):
        assert game.parse_moves(bad, most=1) is None, bad
    assert game.play([(0, 2, 3)]) == 0.0
    assert game.play([(1, 0, 3)]) == 1.0 and game.solved
    assert SudokuGame(game.board, SOLUTION).play([(0, 0, 1)]) == -1.0  # a filled cell
    assert SudokuGame([[0, 2, 3, 4], *SOLUTION[1:]], SOLUTION).play([(0, 0, 2)]) == -1.0  # a rule
    generated = SudokuGame.generate(9, seed=5)
    assert generated.valid() and sum(v == 0 for row in generated.board for v in row) == 40
    assert SudokuGame(generated.solution, generated.solution).solved and generated.board != generated.solution
    with pytest.raises(ValueError, match="square"):
        SudokuGame([[1, 2, 3]] * 3, [[1, 2, 3]] * 3)


SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]


def test_sudoku_workflow_gives_each_step_its_reward(make_workflow):
    puzzle = [[1, 2, 0, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
    workflow = make_workflow("sudoku_workflow", {"puzzle": json.dumps(puzzle), "solution": SOLUTION})
    experiences = workflow.run()
    # the tiny model writes no moves: the first step is invalid and ends the episode
    assert [(e.eid.step, e.reward) for e in experiences] == [(0, -1.0)]
    prompt = experiences[0].messages[0]["content"]
    assert "4x4 sudoku" in prompt and "1 2 0 4\n3 4 1 2" in prompt and "Step 1 of 20" in prompt


# --- ALFWorld, ScienceWorld, WebShop against stand-ins ------------------------------------


def test_alfworld_is_won_when_the_game_says_so_and_actions_come_from_the_action_tags(
    make_workflow, standin_envs, tmp_path
):
    game, log = script(tmp_path, [0.0, 0.0, 1.0])
    (experience,) = make_workflow("alfworld_workflow", {"prompt": str(game)}, workflow_args={"max_env_steps": 5}).run()
    assert experience.reward == 1.0 and experience.metrics["env_steps"] == 3 and experience.metrics["env_done"] == 1
    replies = [m["content"] for m in experience.messages if m["role"] == "assistant"]
    assert received(log) == [action_in_tags(r) for r in replies]
    assert experience.messages[1]["content"] == "Observation: You are in a kitchen."
    assert "Check that your action" in experience.messages[3]["content"]  # after "Nothing happens."


def test_an_unfinished_alfworld_game_scores_minus_a_tenth(make_workflow, standin_envs, tmp_path):
    game, log = script(tmp_path, [0.0] * 10)
    (experience,) = make_workflow("alfworld_workflow", {"prompt": str(game)}, workflow_args={"max_env_steps": 2}).run()
    assert experience.reward == pytest.approx(-0.1) and len(received(log)) == 2 and experience.metrics["env_done"] == 0


def test_step_wise_alfworld_gives_one_experience_per_step_with_gigpo_anchors(make_workflow, standin_envs, tmp_path):
    game, _ = script(tmp_path, [0.0, 0.5, 1.0])
    experiences = make_workflow("step_wise_alfworld_workflow", {"prompt": str(game)}).run()
    assert [e.eid.step for e in experiences] == [0, 1, 2] and {e.reward for e in experiences} == {1.0}
    assert [e.info["step_reward"] for e in experiences] == [0.0, 0.5, 1.0]
    first = experiences[0].messages[1]["content"]
    assert experiences[0].info["env_state_hash"] == hashlib.sha256(first.encode()).hexdigest()


def test_sciworld_rewards_the_best_running_score_over_100(make_workflow, standin_envs, tmp_path):
    jar, _ = script(tmp_path, [10.0, 30.0, -20.0])
    task = json.dumps({"task_name": "boil", "var_num": 3, "jar_path": str(jar)})
    (experience,) = make_workflow("sciworld_workflow", {"prompt": task}).run()
    assert experience.reward == pytest.approx(0.4) and experience.metrics["golden_steps"] == 3
    assert experience.messages[1]["content"].startswith("Observation:\nTask Description: boil (variation 3, easy)")
    with pytest.raises(WorkflowError, match=r"lacks \['jar_path'\]"):
        make_workflow("sciworld_workflow", {"prompt": json.dumps({"task_name": "boil", "var_num": 3})}).run()


def test_webshop_answers_invalid_actions_without_stepping(make_workflow, standin_envs, tmp_path, monkeypatch):
    monkeypatch.setenv("WEBSHOP_SCRIPTS", str(tmp_path))
    _, log = script(tmp_path, [0.0, 0.75], name="7.json")
    (experience,) = make_workflow("webshop_workflow", {"prompt": "7"}, workflow_args={"max_env_steps": 2}).run()
    # the tiny model's replies are no valid action: WebShop is never stepped and nothing is bought
    assert experience.reward == pytest.approx(-0.1) and received(log) == []
    assert "Invalid action" in experience.messages[3]["content"]

    from trinity_workflows.envs.text_games import webshop_env

    episode = WebShopEpisode(webshop_env(), 7)
    episode.reset()
    assert episode.step("click[buy now]")[0].startswith("There is no search bar") is False
    assert episode.step("search[shoes]") == (
        "There is no search bar on this page: click Back to Search first.",
        0.0,
        False,
    )
    assert episode.step("click[Buy Now]")[1:] == (0.75, True)
    assert received(log) == ["click[buy now]", "click[Buy Now]"]


@pytest.mark.parametrize(
    ("action", "problem"),
    [
        ("search[red shoes]", None),
        ("search[]", "put the query in the brackets"),
        ("click[Buy Now]", None),
        ("click[Sell]", "There is no button 'sell'"),
        ("buy", "Invalid action"),
    ],
)
def test_webshop_actions_are_checked_against_the_page(action, problem):
    found = check_webshop_action(action, {"has_search_bar": True, "clickables": ["buy now"]})
    assert found is None if problem is None else problem in found


@pytest.mark.parametrize(
    ("workflow", "prompt", "install"),
    [
        ("alfworld_workflow", "game.json", "pip install alfworld"),
        ("step_wise_alfworld_workflow", "game.json", "pip install alfworld"),
        ("sciworld_workflow", '{"task_name": "t", "var_num": 0, "jar_path": "j"}', "pip install scienceworld"),
        ("webshop_workflow", "1", "princeton-nlp/WebShop"),
    ],
)
def test_a_missing_environment_library_says_what_to_install(make_workflow, workflow, prompt, install):
    with pytest.raises(WorkflowError, match=f"ImportError: cannot import .*{install}"):
        make_workflow(workflow, {"prompt": prompt}).run()


def test_unknown_or_out_of_range_workflow_args_are_reported_by_key():
    issues = IssueCollector()
    target = resolve(Kind.WORKFLOW, "frozen_lake_workflow")
    plugin_args(
        target, {"agent_max_step": 3, "env_max_steps": 0}, "buffer.explorer_input.taskset.workflow_args", issues
    )
    paths = {issue.path for issue in issues.issues}
    assert {f"buffer.explorer_input.taskset.workflow_args.{k}" for k in ("agent_max_step", "env_max_steps")} <= paths
