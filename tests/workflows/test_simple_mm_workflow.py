"""simple_mm_workflow's prompt: the row's images (format.image_key) before its text, each read
before the model is called, so a bad row fails naming its row, column and file."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from helpers.mm_tasks import draw
from trinity.model.multimodal import MediaError
from trinity.plugins import Kind, resolve
from trinity_workflows.base import WorkflowError
from trinity_workflows.workflows import BOXED_SYSTEM_PROMPT

FORMAT = {"prompt_key": "question", "response_key": "answer", "image_key": "picture"}


@pytest.fixture
def square(tmp_path):
    path = tmp_path / "square.png"
    draw("square", "red", random.Random(0)).save(path)
    return str(path)


def test_the_rows_images_come_before_its_question(make_workflow, square):
    row = {"question": "What colour is the square?", "answer": "red", "picture": [square, square]}
    workflow = make_workflow("simple_mm_workflow", row, format=FORMAT)
    system, user = workflow.messages()
    assert system == {"role": "system", "content": BOXED_SYSTEM_PROMPT}  # Trinity-RFT's default: a boxed answer
    assert [p["type"] for p in user["content"]] == ["image", "image", "text"]
    assert isinstance(user["content"][0]["image"], Image.Image) and user["content"][0]["image"].size == (56, 56)
    assert user["content"][2]["text"] == "What colour is the square?"
    assert resolve(Kind.WORKFLOW, "async_simple_mm_workflow") is type(workflow)


def test_bad_rows_are_named_by_row_column_and_file(make_workflow, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    where = "row 3 of taskset t, column 'picture' (image_key)"
    cases = {
        str(broken): f"{where}: file {broken}: not a readable image",
        str(tmp_path / "gone.png"): f"{where}: file {tmp_path / 'gone.png'}: no such file",
        "https://example.org/a.png": "only local files, bytes and data: URLs are read",
        12: f"{where}: int is not an image",
    }
    for value, message in cases.items():
        workflow = make_workflow(
            "simple_mm_workflow", {"question": "?", "answer": "red", "picture": value}, format=FORMAT
        )
        with pytest.raises(MediaError) as error:
            workflow.messages()
        assert message in str(error.value)
        with pytest.raises(WorkflowError, match="workflow simple_mm_workflow failed on task t:3: MediaError"):
            workflow.run()


def test_a_row_without_images_names_image_key(make_workflow):
    workflow = make_workflow(
        "simple_mm_workflow", {"question": "?", "answer": "red"}, format={"prompt_key": "question"}
    )
    with pytest.raises(MediaError, match="row 3 has no images: format.image_key is None"):
        workflow.messages()
