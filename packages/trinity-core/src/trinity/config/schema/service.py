"""The ``service`` section: outside services (Data-Juicer)."""

from __future__ import annotations

from pydantic import Field

from trinity.config.base import ConfigModel


class DataJuicerServiceConfig(ConfigModel):
    """A Data-Juicer server that runs the recipes of data_processor; unset: they run in the process that needs them."""

    server_url: str | None = Field(
        None, description="URL of a running trinity Data-Juicer server (python -m trinity.buffer.data_juicer)."
    )
    auto_start: bool = Field(False, description="Start a local Data-Juicer server for the run (wins over server_url).")
    port: int | None = Field(None, ge=1, le=65535, description="Port of the auto-started server; unset: a free one.")
    allow_code_ops: bool = Field(
        False,
        description="Let the auto-started server run any operator and argument, not only its allowlist's "
        "(python_lambda_mapper, custom_operator_paths, trust_remote_code: runs code); a server at server_url "
        "decides itself.",
    )
    max_request_mb: int = Field(64, ge=1, description="Largest request body the auto-started server accepts, in MiB.")
    max_rows: int = Field(100_000, ge=1, description="Most rows per request the auto-started server accepts.")


class ServiceConfig(ConfigModel):
    """Services outside the run."""

    data_juicer: DataJuicerServiceConfig | None = Field(None, description="The Data-Juicer service.")
