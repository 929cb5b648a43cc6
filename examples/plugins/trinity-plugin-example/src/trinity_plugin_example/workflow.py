"""A workflow: ask the model to reverse a word, score every sample with the reward function."""

from __future__ import annotations

from trinity.common.experience import Experience
from trinity.explorer.workflow import Workflow, set_reward

DEFAULT_INSTRUCTION = "Write the word backwards, letter by letter, and nothing else: {word}"


class ReverseTextWorkflow(Workflow):
    """One chat call with ``repeat_times`` samples (``can_repeat``), each scored on its text.

    The word is the row's ``format.prompt_key`` column; the instruction template is
    ``workflow_args.instruction``. The reward function is the taskset's
    ``default_reward_fn_type`` (this plugin's ``reverse_text_reward``).
    """

    can_repeat = True

    async def run_async(self) -> list[Experience]:
        word = str(self.task.raw[self.task.format.get("prompt_key") or "prompt"])
        prompt = self.task.workflow_args.get("instruction", DEFAULT_INSTRUCTION).format(word=word)
        experiences = await self.model.chat_async([{"role": "user", "content": prompt}], n=self.repeat_times)
        for experience in experiences:
            set_reward(experience, self.score(experience.info["response_text"], truth=word, prompt=prompt))
        return experiences
