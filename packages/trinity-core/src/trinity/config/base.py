"""The base of every model of the configuration: the YAML file's sections and plugins' args.

Both are pydantic models that refuse unknown keys and coerce values the way YAML users
write them (``"32"`` from ``${oc.env:BATCH_SIZE,32}`` becomes ``32`` for an int field).
``trinity.config.load`` turns their validation errors into issues that name the dotted key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticUndefined

from trinity.config.secrets import mask_secrets


class ConfigModel(BaseModel):
    """A mapping of the configuration: every field typed, ranged and documented.

    Models stay mutable: ``trinity.config.derive`` fills derived values in place. Older names of
    their keys are Trinity-RFT's, rewritten before validation by ``trinity.config.compat``.
    """

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, validate_default=False)

    def model_dump(self, *, mode: str = "python", **kwargs: Any) -> dict[str, Any]:
        """The JSON form (``mode="json"``) is what every record of a config is made of
        (``config.yaml``, ``trinity config check``, the trackers' copy): its credentials masked
        (``trinity.config.secrets``). Not a ``model_serializer``: pydantic's wrap serializers drop
        ``include`` and ``exclude`` in the python form, which the algorithm functions' arguments use."""
        dumped = super().model_dump(mode=mode, **kwargs)
        return mask_secrets(dumped) if mode == "json" else dumped


class PluginArgs(ConfigModel):
    """The arguments a plugin takes (``advantage_fn_args``, ``workflow_args``, ``monitor_args``...).

    A plugin declares its own as a subclass named ``Args`` on its class; ``trinity config
    check`` validates the user's arguments with it, so a misspelt or out-of-range argument is
    reported under its dotted key before anything runs. The base takes no arguments.
    """


EFFECT = "x-trinity-effect"
"""JSON Schema key of a field's marker: ``inert`` or ``derived`` (absent: acted on)."""

REASON = "x-trinity-reason"
"""JSON Schema key of why an ``inert`` field cannot act here: the warning and docs/config.md quote it."""


def inert(default: Any = PydanticUndefined, description: str = "", *, reason: str, **constraints: Any) -> Any:
    """A plugin argument (``PluginArgs``) accepted and not acted on (warns when set off its default), and
    ``reason``: why not here. Keys of the config's own sections without effect are ``compat.NO_EFFECT_KEYS``."""
    extra = {EFFECT: "inert", REASON: reason}
    return Field(default, description=description, json_schema_extra=extra, **constraints)


def inert_reason(field: Any) -> str | None:
    """Why an ``inert`` field has no effect (None for a field that acts)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return extra.get(REASON) if extra.get(EFFECT) == "inert" else None


def inert_message(reason: str) -> str:
    """The one wording of an inert key's warning, shared by the loader and the reference."""
    return f"has no effect in trinity: {reason}"


def default_of(field: Any) -> Any:
    """A field's default (a fresh one from its factory)."""
    return field.get_default(call_default_factory=True)


def changed_keys(model: BaseModel, names: Iterable[str] | None = None) -> list[str]:
    """The fields of ``model`` (of ``names``, else all) whose value is not their default, whether the
    file sets it or not: a key trinity cannot act on is refused only then (Trinity-RFT's examples write defaults)."""
    fields = type(model).model_fields
    return [name for name in names or fields if getattr(model, name) != default_of(fields[name])]


def derived(default: Any = PydanticUndefined, description: str = "", **constraints: Any) -> Any:
    """A field the derivation fills; a value given in the file is replaced (with a warning)."""
    return Field(default, description=description, json_schema_extra={EFFECT: "derived"}, **constraints)
