"""Experiences from a supervised dataset: SFT (prompt/response), DPO (chosen/rejected) and CPT
(plain text) rows, for algorithms whose ``data_schema`` is ``sft``, ``dpo`` or ``cpt``.

``SupervisedReader`` tokenizes Trinity-RFT's row schemas (a message list or plaintext columns,
tool schemas in ``tools_key``) with the rollout engines' ``ChatTokenizer``, masked to the
assistant turns, and serves them like an experience buffer: ``read`` batches, epochs or
``total_steps``, ``EndOfBuffer`` at the end, a position to save with the checkpoint.
"""

from __future__ import annotations

import json
import random
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from trinity.buffer import EndOfBuffer, load_rows
from trinity.common.experience import EID, Experience
from trinity.config.schema import FormatConfig, ModelConfig, StorageConfig
from trinity.model.tokenization import ChatTokenizer, load_tokenizer


class SupervisedDataError(ValueError):
    """A row that cannot become a training example; names the file and row."""


def _messages(row: dict[str, Any], fmt: FormatConfig, response: Any = None) -> list[dict[str, Any]]:
    """The row as a conversation; ``response`` (a DPO side) replaces the response column."""
    if fmt.prompt_type in (None, "messages"):  # SFT and DPO data default to messages, as in Trinity-RFT
        messages = list(_json_column(row[fmt.messages_key], fmt.messages_key, "messages_key") or [])
        if response is not None:
            messages += response if isinstance(response, list) else [{"role": "assistant", "content": response}]
        return messages
    system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else None
    system = system or fmt.system_prompt
    answer = row[fmt.response_key] if response is None else response
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": str(row[fmt.prompt_key])})
    if isinstance(answer, list):
        return messages + answer
    return messages + [{"role": "assistant", "content": str(answer)}]


def _json_column(value: Any, key: str, field: str) -> Any:
    """A column's value, decoded when it is JSON text (lists often are, so that ``datasets`` keeps them whole)."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except json.JSONDecodeError as exc:
            raise ValueError(f"column {key!r} ({field}) is not valid JSON: {exc}") from exc
    return value


def _tools(row: dict[str, Any], fmt: FormatConfig) -> list[dict[str, Any]] | None:
    """The tool schemas the conversation offers the model (``tools_key``), if the row has any."""
    tools = _json_column(row.get(fmt.tools_key), fmt.tools_key, "tools_key")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ValueError(f"column {fmt.tools_key!r} (tools_key) must be a list of tool schemas, got {tools!r}")
    return tools or None


def row_to_experience(
    row: dict[str, Any], fmt: FormatConfig, chat: ChatTokenizer, schema: str, max_len: int | None = None
) -> Experience:
    """One SFT, DPO or CPT example from a dataset row, at most ``max_len`` tokens (SFT, CPT)."""
    if schema == "cpt":  # the row's text as is, no chat template: every token after the first trains
        ids = chat.encode(str(row[fmt.prompt_key]))[:max_len]
        if len(ids) < 2:
            raise ValueError(f"text of {len(ids)} token(s): nothing to predict")
        return Experience(tokens=torch.tensor(ids, dtype=torch.long), prompt_length=1)
    tools = _tools(row, fmt)
    if schema == "dpo":
        sides = [
            chat.conversation(_messages(row, fmt, row[key]), tools, last_turn_only=True)
            for key in (fmt.chosen_key, fmt.rejected_key)
        ]
        prompt = sides[0].tokens[: sides[0].prompt_length]
        if sides[1].tokens[: sides[1].prompt_length] != prompt:
            raise ValueError(
                "the chat template renders the prompt differently before the chosen and rejected responses"
            )
        return Experience(
            tokens=torch.tensor(prompt, dtype=torch.long),
            prompt_length=len(prompt),
            chosen=torch.tensor(sides[0].response, dtype=torch.long),
            rejected=torch.tensor(sides[1].response, dtype=torch.long),
        )
    # every assistant turn trains with enable_concatenated_multi_turn, else the last one
    conversation = chat.conversation(_messages(row, fmt), tools, last_turn_only=not fmt.enable_concatenated_multi_turn)
    prompt, response = conversation.tokens[: conversation.prompt_length], conversation.response
    limit = max_len - len(prompt) if max_len else len(response)
    if limit < 1:
        raise ValueError(f"prompt of {len(prompt)} tokens leaves no room within max_model_len {max_len}")
    return Experience(
        tokens=torch.tensor(prompt + response[:limit], dtype=torch.long),
        prompt_length=len(prompt),
        action_mask=torch.tensor(conversation.action_mask[: len(response)][:limit], dtype=torch.long),
        truncate_status="response_truncated" if len(response) > limit else None,
    )


class SupervisedReader:
    """A dataset as an experience stream: shuffled per epoch (seeded), resumable."""

    def __init__(self, storage: StorageConfig, model: ModelConfig, schema: str, seed: int = 42):
        self.storage = storage
        self.schema = schema
        self.seed = seed
        self.chat = load_tokenizer(model, storage.format)
        self.max_len = model.max_model_len
        self.rows = load_rows(storage)
        self.epoch = 0
        self.index = 0
        self.served = 0
        self.limit = storage.total_steps * storage.batch_size if storage.total_steps else None
        self.order = self._order()

    def _order(self) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def planned_steps(self, batch_size: int) -> int:
        """Batches of ``batch_size`` until ``total_steps`` or the last epoch ends."""
        examples = self.limit if self.limit is not None else len(self.rows) * (self.storage.total_epochs or 1)
        return -(-examples // batch_size)

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        batch = []
        while len(batch) < batch_size and (self.limit is None or self.served < self.limit):
            if self.index == len(self.order):
                if self.epoch + 1 >= (self.storage.total_epochs or 1) and self.limit is None:
                    break
                self.epoch, self.index = self.epoch + 1, 0
                self.order = self._order()
            row_number = self.order[self.index]
            batch.append(self._experience(row_number))
            self.index += 1
            self.served += 1
        if not batch:
            raise EndOfBuffer(f"{self.storage.name}: {self.served} examples served over {self.epoch + 1} epoch(s)")
        return batch

    def _experience(self, row_number: int) -> Experience:
        try:
            exp = row_to_experience(self.rows[row_number], self.storage.format, self.chat, self.schema, self.max_len)
        except (KeyError, ValueError, TypeError) as exc:
            raise SupervisedDataError(
                f"{self.storage.path}, row {row_number + 1}: {type(exc).__name__}: {exc}"
            ) from exc
        exp.eid = EID(batch=f"epoch{self.epoch}", task=str(row_number))
        return exp

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "served": self.served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index, self.served = state["epoch"], state["index"], state["served"]
        self.order = self._order()

    def commit(self) -> None:
        """Nothing to make durable: the position lives in the trainer's checkpoint metadata."""

    def fenced(self) -> AbstractContextManager[None]:
        """Nothing to fence: a dataset file is only read, and the position is the checkpoint's."""
        return nullcontext()

    def close(self) -> None:
        pass
