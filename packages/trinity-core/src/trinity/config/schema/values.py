"""Value types of the schema: case-insensitive enums and ranges (older names: ``trinity.config.compat``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field


def _choice(case: str = "lower") -> BeforeValidator:
    """Case-insensitive enum values."""

    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            return value.strip().upper() if case == "upper" else value.strip().lower()
        return getattr(value, "value", value)  # an Enum member

    return BeforeValidator(normalise)


Mode = Annotated[Literal["both", "train", "explore", "bench", "serve", "colocate"], _choice()]
PromptType = Annotated[Literal["messages", "plaintext"], _choice()]
Durability = Annotated[Literal["fast", "safe"], _choice()]
SyncStyle = Annotated[Literal["fixed", "trainer_driven", "explorer_driven", "fully_async"], _choice()]
SyncMethodName = Annotated[str, _choice()]
"""A sync method plugin's name."""
SaveStrategy = Annotated[Literal["single_thread", "single_process", "single_node", "unrestricted"], _choice()]
SaveHFCheckpoint = Annotated[Literal["last", "always", "never"], _choice()]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], _choice(case="upper")]
LossAggMode = Annotated[
    Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"],
    _choice(),
]
ConcurrentMode = Annotated[Literal["sequential", "asynchronous", "multi-threading"], _choice()]
LRSchedulerType = Annotated[Literal["constant", "cosine"], _choice()]
TrainerStrategy = Annotated[Literal["fsdp", "fsdp2", "megatron"], _choice()]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
