"""The studio in a real browser: beginner mode, a live error, fix, save, and lossless round trips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.seed_env import set_seed_env
from trinity.config import check_tree
from trinity.config.load import read_yaml

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests" / "config" / "seeds"
EXAMPLES = [p for p in sorted(SEEDS.glob("*.yaml")) if p.name != "configuration_guide_verl_trainer.yaml"]
EXAMPLES.append(ROOT / "examples" / "quickstart" / "quickstart.yaml")
SCREENSHOT = ROOT / "docs" / "studio.png"
"""The README's screenshot: written by the beginner-mode test when TRINITY_UPDATE_SCREENSHOTS is set."""


def field(page, path: str):
    return page.locator(f'[data-path="{path}"]')


def wait_checked(page) -> None:
    """Wait until the server's check of the latest edit is on the page."""
    page.evaluate("document.body.dataset.checked = ''")
    page.wait_for_function("document.body.dataset.checked !== ''")


def fill(page, values: dict[str, str]) -> None:
    for path, value in values.items():
        box = field(page, path)
        if box.evaluate("e => e.tagName") == "SELECT":
            box.select_option(value)
        else:
            box.fill(value)


def test_beginner_mode_shows_an_error_by_its_field_and_saves_a_config_that_checks(studio, page, tmp_path):
    saved = tmp_path / "my_run.yaml"
    page.goto(studio(saved))
    page.wait_for_selector('[data-path="model.model_path"]')
    assert page.url.endswith("/") and "token" not in page.url  # the cookie holds it now
    fill(
        page,
        {
            "project": "demo",
            "name": "first",
            "checkpoint_root_dir": str(tmp_path / "checkpoints"),
            "model.model_path": str(tmp_path / "model"),
            "model.max_prompt_tokens": "64",
            "model.max_response_tokens": "32",
            "buffer.explorer_input.taskset.path": str(tmp_path / "tasks.jsonl"),
            "buffer.explorer_input.default_workflow_type": "math_workflow",
            "buffer.explorer_input.default_reward_fn_type": "math_reward",
            "algorithm.algorithm_type": "grpo",
            "algorithm.repeat_times": "4",
            "cluster.node_num": "1",
            "cluster.gpu_per_node": "8",
            "explorer.rollout_model.engine_num": "2",
            "explorer.rollout_model.tensor_parallel_size": "2",
            "buffer.batch_size": "abc",
        },
    )
    wait_checked(page)
    error = page.locator('[data-field="buffer.batch_size"] .error')
    assert error.inner_text() == "expected int, got str 'abc'"
    assert "bad" in page.locator("#summary").get_attribute("class")
    # 2 engines x TP 2 = 4 GPUs for the explorer, the other 4 of 1 x 8 for the trainer.
    assert "trainer 4; of node_num 1 × gpu_per_node 8 = 8" in page.locator("#gpu-arithmetic").inner_text()

    fill(page, {"buffer.batch_size": "8", "cluster.gpu_per_node": "0"})
    fill(page, {"explorer.rollout_model.engine_type": "transformers", "trainer.trainer_type": "torch"})
    fill(page, {"explorer.rollout_model.tensor_parallel_size": ""})  # one device per transformers engine
    wait_checked(page)
    assert error.inner_text() == ""
    assert page.locator("#summary").inner_text() == "valid: passes trinity config check"
    page.evaluate("window.scrollTo(0, 0)")
    shot = page.screenshot(path=str(tmp_path / "studio.png"))
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("TRINITY_UPDATE_SCREENSHOTS"):  # refresh the README's picture (off in CI: fonts differ)
        SCREENSHOT.write_bytes(shot)

    page.click("#run")
    page.wait_for_function("document.getElementById('command').textContent.includes('trinity run')")
    assert page.locator("#command").inner_text().endswith(f"trinity run --config {saved}")
    check = subprocess.run(
        [sys.executable, "-m", "trinity.cli", "config", "check", str(saved)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert check.returncode == 0, check.stderr
    assert "batch_size: 8" in saved.read_text()

    with page.expect_download() as download:
        page.click("#download")
    assert Path(download.value.path()).read_text() == saved.read_text()


def open_every_section(page) -> None:
    """Expert mode, every section unfolded (sections fill when first opened)."""
    page.click("#mode-expert")
    while page.locator("details:not([open])").count():
        page.locator("details:not([open])").evaluate_all("ds => ds.forEach(d => d.open = true)")


def retype_every_field(page) -> int:
    """Send each shown value back through its input, as if typed: the tree becomes the form's."""
    return page.locator("[data-path]").evaluate_all(
        """inputs => inputs.filter(i => i.value !== '').map(i => i.dispatchEvent(
               new Event(i.tagName === 'SELECT' ? 'change' : 'input'))).length"""
    )


@pytest.fixture
def seed_env(monkeypatch, tmp_path):
    """The environment variables the seed configs read (as tests/config/test_seed_configs.py)."""
    set_seed_env(monkeypatch, tmp_path)


def checked(path: Path) -> tuple[dict, list, list]:
    """What ``trinity config check`` makes of a file: the config, its errors and warnings."""
    config, issues = check_tree(read_yaml(path))
    return config.model_dump(mode="json"), issues.issues, issues.inert + issues.warnings


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_configs_round_trip_through_the_form(studio, page, tmp_path, seed_env, example):
    copy = tmp_path / example.name
    copy.write_text(example.read_text())
    page.goto(studio(copy))
    page.wait_for_selector("#form fieldset")
    open_every_section(page)
    assert retype_every_field(page) > 5
    asked = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click("#save")
    page.wait_for_function("document.getElementById('saved').textContent.startsWith('saved')")
    assert asked[0] == f"{copy} exists. Replace it?"  # the file it opened: replaced once the user says so
    errors = checked(example)[1]  # a fragment has errors: saved once the user says "save anyway"
    assert asked[1:] == (
        [f"The config has {len(errors)} error(s): trinity run refuses it until they are fixed. Save anyway?"]
        if errors
        else []
    )
    assert copy.read_text() != example.read_text()  # written by the studio
    assert checked(copy) == checked(example)


def test_an_existing_file_stays_unless_the_user_confirms_and_the_page_needs_the_token(studio, page, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("project: mine\n")
    url = studio(mine)
    page.goto(url)
    page.wait_for_selector("#form fieldset")
    field(page, "project").fill("changed")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#save")
    page.wait_for_function("document.getElementById('saved').textContent.startsWith('not saved')")
    assert "exists" in page.locator("#saved").inner_text()
    assert mine.read_text() == "project: mine\n"

    stranger = page.context.browser.new_context()
    try:
        answer = stranger.new_page().goto(url.split("?")[0])
        assert answer.status == 401 and "?token=" in answer.text()
    finally:
        stranger.close()
