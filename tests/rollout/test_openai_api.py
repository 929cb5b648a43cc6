"""The OpenAI-compatible endpoint of an engine without one of its own, through the official client."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from helpers.engine_helpers import transformers_client
from helpers.tool_model import CALCULATOR, QUESTIONS, answer, tool_call_text
from trinity.common.http_guard import KEEP_ALIVE_SECONDS
from trinity.config.schema import InferenceModelConfig, ModelConfig
from trinity.model.engines import EngineStartError, SamplingArgs
from trinity.model.tokenization import TOOL_CALL_PARSERS
from trinity.rollout.client import EngineClient
from trinity.rollout.model_wrapper import ModelWrapper
from trinity.rollout.openai_api import MAX_N, MAX_STOP_CHARS, MAX_STOPS

MESSAGES = [{"role": "user", "content": "What is 1+1?"}]


@contextmanager
def serve(model: Path, **settings) -> Iterator[EngineClient]:
    """An engine client on ``model`` serving the endpoint with ``settings``, closed on exit."""
    config = InferenceModelConfig(model_path=str(model), engine_type="transformers", name="tiny", **settings)
    with transformers_client(config, ModelConfig(model_path=str(model), max_model_len=512)) as client:
        client.serve_openai(config)
        yield client


@pytest.fixture(scope="module")
def endpoint(tiny_model_dir: Path):
    with serve(tiny_model_dir) as client:
        yield client


def test_chat_with_token_ids_and_logprobs_for_training(endpoint):
    api = openai.OpenAI(base_url=endpoint.api_url, api_key="EMPTY")
    assert endpoint.api_url.startswith("http://127.0.0.1:")
    response = api.chat.completions.create(
        model="tiny", messages=MESSAGES, n=2, max_tokens=6, logprobs=True, extra_body={"return_token_ids": True}
    )
    assert len(response.choices) == 2 and response.model == "tiny"
    prompt = response.model_extra["prompt_token_ids"]
    for choice in response.choices:
        tokens = choice.model_extra["token_ids"]
        assert 1 <= len(tokens) <= 6 and len(choice.logprobs.content) == len(tokens)
        assert all(t.logprob <= 0 for t in choice.logprobs.content)
        assert choice.finish_reason in ("stop", "length")
    assert response.usage.prompt_tokens == len(prompt)
    models = api.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completions_and_health(endpoint):
    api = openai.OpenAI(base_url=endpoint.api_url, api_key="EMPTY")
    completion = api.completions.create(model="tiny", prompt="1+1=", max_tokens=4, temperature=0.0)
    again = api.completions.create(model="tiny", prompt="1+1=", max_tokens=4, temperature=0.0)
    assert completion.choices[0].text == again.choices[0].text  # greedy
    assert httpx.get(endpoint.api_url.removesuffix("/v1") + "/health").json() == {"status": "ok"}


def test_a_bad_request_is_a_400_naming_the_field(endpoint):
    api = openai.OpenAI(base_url=endpoint.api_url, api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="top_p"):
        api.chat.completions.create(model="tiny", messages=MESSAGES, top_p=2.0)
    with pytest.raises(openai.BadRequestError, match="messages"):
        api.chat.completions.create(model="tiny", messages=[])
    with pytest.raises(openai.BadRequestError, match=f"n: Input should be less than or equal to {MAX_N}"):
        api.chat.completions.create(model="tiny", messages=MESSAGES, n=MAX_N + 1, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match=f"stop.0: String should have at most {MAX_STOP_CHARS} characters"):
        api.completions.create(model="tiny", prompt="1+1=", stop="x" * (MAX_STOP_CHARS + 1), max_tokens=1)
    with pytest.raises(openai.BadRequestError, match=f"stop: List should have at most {MAX_STOPS} items"):
        api.completions.create(model="tiny", prompt="1+1=", stop=["x"] * (MAX_STOPS + 1), max_tokens=1)
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\].content\[1\].text: a text part needs its text"):
        parts = [{"type": "text", "text": "What is "}, {"type": "text"}]
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": parts}])
    plain = httpx.post(f"{endpoint.api_url}/chat/completions", content=b"{}", headers={"content-type": "text/plain"})
    assert plain.status_code == 415  # the request guard: a web page cannot post here without a preflight


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [  # each a 500 before (tests/security/test_fuzz_apis.py found them)
        ("chat/completions", {"messages": [{}]}, "messages[0].role"),
        ("chat/completions", {"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ("chat/completions", {"messages": [{"role": "assistant", "tool_calls": [{}]}]}, "the chat template cannot"),
        ("chat/completions", {"messages": MESSAGES, "temperature": 1e39}, "temperature"),
        ("chat/completions", {"messages": MESSAGES, "seed": 2**70}, "seed"),
        ("completions", {"prompt": ""}, "prompt"),
        ("completions", {"prompt": "1+1= " * 600}, "no room to generate"),
    ],
)
def test_requests_the_engine_cannot_serve_are_400s_naming_the_field(endpoint, path, body, field):
    answer = httpx.post(f"{endpoint.api_url}/{path}", json={"max_tokens": 2, **body}, timeout=60)
    assert answer.status_code == 400 and field in answer.json()["error"]["message"], answer.text


def test_an_api_key_is_required_when_set_and_trinity_clients_send_it(tiny_model_dir):
    """``api_key`` set: a request without it is a 401 (``/health`` stays open); the official
    client given the key, and a workflow's client made by ``ModelWrapper``, get through."""
    with serve(tiny_model_dir, api_key="sesame") as client:
        without = openai.OpenAI(base_url=client.api_url, api_key="EMPTY", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            without.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
        with pytest.raises(openai.AuthenticationError):
            without.models.list()
        assert httpx.get(client.api_url.removesuffix("/v1") + "/health").status_code == 200
        given = openai.OpenAI(base_url=client.api_url, api_key="sesame", max_retries=0)
        assert given.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1).choices
        model = ModelWrapper(client, SamplingArgs(n=1), enable_history=True)
        model.get_openai_client().chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
        assert len(model.extract_experience_from_history()) == 1


def test_content_given_as_text_parts_is_served_as_its_text(endpoint):
    """Agent frameworks (AgentScope, LangChain) send content as a list of parts."""
    api = openai.OpenAI(base_url=endpoint.api_url, api_key="EMPTY", max_retries=0)
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "1+1?"}]
    as_parts = api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": parts}], max_tokens=1, extra_body={"return_token_ids": True}
    )
    as_text = api.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=1, extra_body={"return_token_ids": True}
    )
    assert as_parts.model_extra["prompt_token_ids"] == as_text.model_extra["prompt_token_ids"]
    image = {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\].content: only text parts are served"):
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": [image]}])


def test_workflow_openai_client_records_its_calls_as_experiences(endpoint):
    """``enable_history``: what a workflow asks through the OpenAI client becomes training data."""
    model = ModelWrapper(endpoint, SamplingArgs(n=1), enable_history=True)
    api = model.get_openai_client()
    api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5)
    api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, n=2)
    experiences = model.extract_experience_from_history()
    assert len(experiences) == 3
    for exp in experiences:
        assert exp.prompt_length > 0 and 1 <= exp.response_length <= 5
        assert exp.logprobs.numel() == exp.response_length
        assert exp.messages[0] == MESSAGES[0] and exp.messages[-1]["role"] == "assistant"


def test_reasoning_and_tool_calls_are_parsed_when_configured(tiny_model_dir):
    """The tiny model writes no tags: its replies are checked against the parsers' rules, and a
    reply forced through the parser (temperature 0 makes it the same twice) shows no tool call."""
    from trinity.model.engines import Completion
    from trinity.rollout.openai_api import ChatRequest, _chat_choice

    request = ChatRequest(messages=MESSAGES, tools=[{"type": "function", "function": {"name": "add"}}])
    reply = Completion([1], [2, 3], [-0.1, -0.2], '<think>sum it</think>Let me add.\n<tool_call>\n{"name": "add", '
                       '"arguments": {"a": 1, "b": 1}}\n</tool_call>', "stop")  # fmt: skip
    hermes = TOOL_CALL_PARSERS["hermes"]
    choice = _chat_choice(0, reply, request, reasoning=True, tools=hermes)
    assert choice["message"]["reasoning_content"] == "sum it"
    assert choice["message"]["content"] == "Let me add."
    (call,) = choice["message"]["tool_calls"]
    assert (
        call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 1}'} and choice["finish_reason"] == "tool_calls"
    )
    plain = _chat_choice(0, Completion([1], [2], [-0.1], "just text", "length"), request, reasoning=False, tools=hermes)
    assert plain["message"] == {"role": "assistant", "content": "just text"} and plain["finish_reason"] == "length"
    with serve(
        tiny_model_dir, enable_auto_tool_choice=True, tool_call_parser="hermes", reasoning_parser="qwen3"
    ) as client:
        api = openai.OpenAI(base_url=client.api_url, api_key="EMPTY")
        response = api.chat.completions.create(model="tiny", messages=MESSAGES, tools=request.tools, max_tokens=4)
        assert response.choices[0].message.tool_calls is None  # the tiny model calls no tool


def test_tools_are_rendered_by_the_chat_template(endpoint):
    """A request's tools reach the prompt through the engine's template; a conversation that
    carries tool calls and tool results (as agents send them back) renders too."""
    api = openai.OpenAI(base_url=endpoint.api_url, api_key="EMPTY", max_retries=0)
    tokenizer = endpoint.engine.tokenizer
    ask = {"model": "tiny", "max_tokens": 2, "extra_body": {"return_token_ids": True}}
    response = api.chat.completions.create(messages=MESSAGES, tools=[CALCULATOR], **ask)
    prompt = tokenizer.decode(response.model_extra["prompt_token_ids"])
    assert prompt.startswith('<|im_start|>system\n# Tools\n\n<tools>\n{"type": "function"')
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    follow_up = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    response = api.chat.completions.create(messages=follow_up, tools=[CALCULATOR], **ask)
    prompt = tokenizer.decode(response.model_extra["prompt_token_ids"])
    assert prompt.endswith(
        '<|im_start|>assistant\n\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n'
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    with pytest.raises(openai.BadRequestError, match="tools.0: Input should be a valid dictionary"):
        api.chat.completions.create(messages=MESSAGES, tools=["calculator"], **ask)


def test_an_unknown_tool_call_parser_fails_at_start(tiny_model_dir):
    with pytest.raises(EngineStartError, match="tool_call_parser 'mistral': this endpoint parses hermes"):
        with serve(tiny_model_dir, enable_auto_tool_choice=True, tool_call_parser="mistral"):
            pass


def test_a_model_that_calls_tools_gets_openai_tool_calls(tool_model_dir):
    """The model taught to call the calculator, through the official client: its call comes back
    parsed (hermes), and ``tool_choice: none`` leaves the text alone."""
    with serve(tool_model_dir, enable_auto_tool_choice=True, tool_call_parser="hermes") as client:
        api = openai.OpenAI(base_url=client.api_url, api_key="EMPTY")
        question, expression = next(iter(QUESTIONS.items()))
        messages = [{"role": "user", "content": question}]
        ask = {"model": "tiny", "messages": messages, "tools": [CALCULATOR], "max_tokens": 96, "temperature": 0.0}
        choice = api.chat.completions.create(**ask).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.function.name == "calculator" and call.function.arguments == f'{{"expression": "{expression}"}}'
        untouched = api.chat.completions.create(**ask, tool_choice="none").choices[0]
        assert untouched.message.tool_calls is None and untouched.message.content == tool_call_text(expression)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": answer(expression)},
        ]
        final = api.chat.completions.create(**{**ask, "messages": messages}).choices[0]
        assert final.message.content == answer(expression) and final.finish_reason == "stop"


def test_base_port_places_each_engine_s_endpoint_and_requests_are_logged_on_request(endpoint, tiny_model_dir, caplog):
    """Trinity-RFT's base_port (engine i on base_port + i) and enable_log_requests."""
    from helpers.ports import free_port

    base = free_port() - 1  # engine 1 takes base + 1: the free port
    with serve(tiny_model_dir, base_port=base, engine_id=1, enable_log_requests=True) as client:
        assert client.api_url == f"http://127.0.0.1:{base + 1}/v1"
        with caplog.at_level("INFO", logger="trinity.rollout.openai_api"):
            for served in (client, endpoint):  # the module's endpoint: the defaults, nothing logged
                api = openai.OpenAI(base_url=served.api_url, api_key="EMPTY")
                api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    logged = [r.getMessage() for r in caplog.records if r.name == "trinity.rollout.openai_api"]
    assert len(logged) == 1
    assert logged == [
        '/v1/chat/completions: {"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"What is 1+1?"}]}'
    ]


def test_an_idle_connection_outlives_the_clients_pool(endpoint):
    """The endpoint keeps an idle connection longer than httpx pools one (5 s), so a client never
    sends on a connection the server is closing (uvicorn's default of 5 s reset such requests)."""
    assert KEEP_ALIVE_SECONDS > httpx.Limits().keepalive_expiry
    url = urlsplit(endpoint.api_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    connection.request("GET", "/health")
    assert connection.getresponse().read() == b'{"status":"ok"}'
    time.sleep(6)  # past uvicorn's default keep-alive
    connection.request("GET", "/health")  # the same socket: a closed one fails here or at the read
    assert connection.getresponse().read() == b'{"status":"ok"}'
    connection.close()
