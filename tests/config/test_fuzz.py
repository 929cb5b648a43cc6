"""Property: whatever a config file holds, ``trinity config check`` answers with the resolved config
or a list of errors (exit 0 or 2), never a traceback.

Hypothesis sets random keys of the schema to random values (numbers out of range, strings of
every kind, interpolations that fail, lists and mappings where scalars belong) and deletes
random keys of a valid base config.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinity.cli import main
from trinity.config.load import children
from trinity.config.schema import Config

BASE = {
    "project": "fuzz",
    "name": "run",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
    "model": {"model_path": "/models/tiny", "max_prompt_tokens": 64, "max_response_tokens": 32},
    "cluster": {"node_num": 1, "gpu_per_node": 0},
    "explorer": {"rollout_model": {"engine_type": "transformers"}},
    "trainer": {"trainer_type": "torch"},
    "buffer": {
        "batch_size": 4,
        "explorer_input": {"taskset": {"path": "/data/tasks.jsonl", "default_workflow_type": "math_workflow"}},
    },
}


def _key_paths(model: type, prefix: tuple[str, ...] = (), depth: int = 0) -> list[tuple[str, ...]]:
    """Dotted key paths of the schema (sections, lists and mappings as plain keys), depth-bounded."""
    paths = []
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        paths.append(path)
        inner = children(field.annotation)
        if inner and inner[0] == "one" and depth < 4:
            paths += _key_paths(inner[1], path, depth + 1)
    return paths


KEYS = _key_paths(Config)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["${oc.env:NO_SUCH_TRINITY_VAR}", "${no.such.key}", "${oc.env:HOME}", "1e-5", "-3", "true", ""]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
EDITS = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.just("<delete>"), VALUES)), min_size=1, max_size=6)


def _apply(config: dict, path: tuple[str, ...], value) -> None:
    node = config
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            if value == "<delete>":
                return
            node[key] = {}
        node = node[key]
    if value == "<delete>":
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz")
    old = os.getcwd()
    os.chdir(path)
    yield Path(path)
    os.chdir(old)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=EDITS)
def test_config_check_never_raises_a_traceback(workdir, edits):
    config = copy.deepcopy(BASE)
    for path, value in edits:
        _apply(config, path, value)
    file = workdir / "config.yaml"
    file.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(main, ["config", "check", str(file)])
    assert result.exit_code in (0, 2), (config, result.output, result.exception)
    if result.exit_code == 2:
        assert "error" in result.output


GROUP_ALGORITHMS = ["grpo", "dapo", "gspo", "opmd", "rloo", "asymre", "rec"]
OTHER_ALGORITHMS = ["grpo_verl", "reinforceplusplus", "remax", "topr"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    algorithm=st.sampled_from(GROUP_ALGORITHMS + OTHER_ALGORITHMS),
    repeat_times=st.integers(1, 3),
    min_response=st.integers(0, 48),
    gpus=st.tuples(st.integers(1, 2), st.integers(0, 4), st.integers(1, 3), st.sampled_from([1, 2])),
)
def test_the_rules_that_would_waste_a_run_are_errors_naming_their_key(
    workdir, algorithm, repeat_times, min_response, gpus
):
    """One rollout per task under a group algorithm, a minimum response over the maximum (32), and
    more GPUs for the explorer than the cluster has: each is an error naming the key to change, and
    a config that breaks none of them is not refused for them."""
    node_num, gpu_per_node, engine_num, tensor_parallel = gpus
    config = copy.deepcopy(BASE)
    config["algorithm"] = {"algorithm_type": algorithm, "repeat_times": repeat_times}
    config["model"]["min_response_tokens"] = min_response
    config["cluster"] = {"node_num": node_num, "gpu_per_node": gpu_per_node}
    config["explorer"]["rollout_model"] |= {"engine_num": engine_num, "tensor_parallel_size": tensor_parallel}
    file = workdir / "rules.yaml"
    file.write_text(yaml.safe_dump(config))
    output = CliRunner().invoke(main, ["config", "check", str(file)]).output
    total = node_num * gpu_per_node
    broken = {
        "algorithm.repeat_times": algorithm in GROUP_ALGORITHMS and repeat_times == 1,
        "model.min_response_tokens": min_response > 32,
        "explorer.rollout_model.engine_num": 0 < total <= engine_num * tensor_parallel,
    }
    for key, is_broken in broken.items():
        assert (f"{key}:" in output) == is_broken, (key, config, output)
