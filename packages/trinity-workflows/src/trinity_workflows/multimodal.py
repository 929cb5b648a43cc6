"""``simple_mm_workflow``: a single-call task whose prompt shows the row's images to a
vision-language model (Trinity-RFT's workflow of that name; ``async_simple_mm_workflow`` is the
same, every workflow here being async-native).

The user turn is the ``format.image_key`` images (their forms: docs/data.md), then ``video_key``'s
videos, then the ``prompt_key`` text; each image is read before the model is called, so an
unreadable one fails the task naming its row, column and file. The reward function scores the
response against ``response_key``; without one, ``math_boxed_reward`` with Trinity-RFT's
boxed-answer system prompt.
"""

from __future__ import annotations

from typing import Any

from trinity.plugin_api import MediaError, load_image
from trinity_workflows.base import Messages
from trinity_workflows.workflows import BOXED_SYSTEM_PROMPT, SimpleWorkflow


class SimpleMMWorkflow(SimpleWorkflow):
    """Ask once about the row's images (``repeat_times`` samples) and score every sample."""

    default_reward_fn = "math_boxed_reward"
    default_system_prompt = BOXED_SYSTEM_PROMPT

    def _media(self, key_name: str, kind: str) -> list[dict[str, Any]]:
        key = self.task.format.get(key_name)
        value = self.task.raw.get(key) if key else None
        if value is None:
            return []
        values = value if isinstance(value, list) else [value]
        where = f"row {self.task.index} of taskset {self.task.taskset_name or '?'}, column {key!r} ({key_name})"
        if kind == "video":
            return [{"type": "video", "video": v} for v in values]
        return [{"type": "image", "image": load_image(v, where)} for v in values]

    def messages(self) -> Messages:
        messages = super().messages()
        media = self._media("image_key", "image") + self._media("video_key", "video")
        if not media:
            key = self.task.format.get("image_key")
            raise MediaError(
                f"row {self.task.index} has no images: format.image_key is {key!r}"
                + ("" if key else " (set it to the column of the images)")
            )
        user = next(m for m in reversed(messages) if m.get("role") == "user")
        text = user["content"]
        user["content"] = [*media, *([{"type": "text", "text": text}] if isinstance(text, str) else text)]
        return messages
