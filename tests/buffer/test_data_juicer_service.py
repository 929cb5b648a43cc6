"""``service.data_juicer``: recipes run by trinity's Data-Juicer server, started for the run
(``auto_start``) or found at ``server_url``; a server that cannot start or be reached is an
error naming its key."""

from __future__ import annotations

import socket

import pytest

from ports import free_port
from trinity.algorithm.experience_ops import DataJuicer
from trinity.buffer.data_juicer import DataJuicerError, RecipeClient, recipe
from trinity.config.schema import DataJuicerServiceConfig

RECIPE = recipe("test", [{"text_length_filter": {"min_len": 5}}], num_process=1)
ROWS = [{"text": "long enough", "i": 0}, {"text": "no", "i": 1}]


def test_an_auto_started_server_runs_the_recipe_and_stops_with_its_client():
    port = free_port()
    client = RecipeClient("test", RECIPE, DataJuicerServiceConfig(auto_start=True, port=port))
    try:
        kept = client.run(ROWS)
        assert [row["i"] for row in kept] == [0] and kept[0]["__dj__stats__"]["text_len"] == 11
        other = RecipeClient("other", RECIPE, DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}/"))
        assert [row["i"] for row in other.run(ROWS)] == [0]  # a second client of the same server
        with pytest.raises(DataJuicerError, match="^bad: Data-Juicer rejects the recipe"):
            RecipeClient("bad", {"process": [{"no_such_op": {}}]}, DataJuicerServiceConfig(server_url=client.url))
    finally:
        process = client.process
        client.close()
    assert process.poll() is not None


def test_the_experience_operator_runs_on_the_service():
    op = DataJuicer(operators=[{"text_length_filter": {"min_len": 5}}], np=1, service_config={"auto_start": True})
    try:
        assert op.runner.process is not None
    finally:
        op.close()
    assert op.runner.process is None


def test_an_unreachable_server_or_one_that_cannot_start_names_its_key():
    port = free_port()
    with pytest.raises(
        DataJuicerError,
        match=rf"^service.data_juicer.server_url: no Data-Juicer server answers at http://127.0.0.1:{port}",
    ):
        RecipeClient("test", RECIPE, DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}"))
    with socket.socket() as taken:  # the port is in use: the server cannot bind it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(
            DataJuicerError,
            match=rf"^service.data_juicer.auto_start: the Data-Juicer server did not start on port {busy}",
        ):
            RecipeClient("test", RECIPE, DataJuicerServiceConfig(auto_start=True, port=busy))
    with pytest.raises(DataJuicerError, match="^service.data_juicer: set server_url, or auto_start: true"):
        RecipeClient("test", RECIPE, DataJuicerServiceConfig())
