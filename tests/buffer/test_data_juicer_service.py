"""``service.data_juicer``: recipes run by trinity's Data-Juicer server, started for the run
(``auto_start``) or found at ``server_url``; a server that cannot start or be reached is an
error naming its key. The server is a door (``docs/security.md``): it needs its token, takes
JSON only, bounds bodies, rows and its cache, answers a malformed request with a 4xx naming the
field, and runs no code from a recipe unless started with ``--allow-code-ops``."""

from __future__ import annotations

import http.client
import http.server
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from helpers.ports import free_port
from trinity.algorithm.experience_ops import DataJuicer
from trinity.buffer.data_juicer import MAX_RECIPES, TOKEN_ENV, DataJuicerError, RecipeClient, RecipeRunner, recipe
from trinity.buffer.data_juicer_allowlist import ALLOWED, FILTER_ARGS, OPERATOR_ARGS
from trinity.config.schema import DataJuicerServiceConfig

RECIPE = recipe("test", [{"text_length_filter": {"min_len": 5}}], num_process=1)
ROWS = [{"text": "long enough", "i": 0}, {"text": "no", "i": 1}]
TOKEN = "test-token"
MAX_ROWS = 3


def request(port: int, method: str, path: str, body: bytes | dict | None = None, **headers: str):
    """(status, JSON reply) of one request; ``headers`` with ``_`` for ``-``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    connection.request(method, path, body=body, headers=sent)
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b"null")


def post(port: int, body: bytes | dict, token: str | None = TOKEN, **headers: str):
    headers.setdefault("Content_Type", "application/json")
    return request(port, "POST", "/process", body, **headers, **({"Authorization": f"Bearer {token}"} if token else {}))


PROBE = "trinity_data_juicer_probe"
"""A string the server must treat as data: its ``sitecustomize`` (on the server's path) audits the
process and writes ``probe_marker`` when it is compiled (``eval``, ``exec``), imported, opened as a
file or handed to a subprocess."""

AUDIT = f"""import os
import sys

def _probe(event, args, _seen=[]):
    if _seen or event not in ("compile", "import", "open", "subprocess.Popen", "os.system"):
        return
    if {PROBE!r} in repr(args[:2]):
        _seen.append(event)
        with open(os.environ.get("TRINITY_PROBE_MARKER", {{marker!r}}), "a") as f:
            f.write(event + " " + repr(args[:2])[:300] + "\\n")

sys.addaudithook(_probe)
"""


@pytest.fixture(scope="module")
def probe_marker(tmp_path_factory) -> Path:
    """The file the server's audit hook writes when it sees ``PROBE`` used as code, a module or a file."""
    folder = tmp_path_factory.mktemp("probe")
    marker = folder / "seen"
    (folder / "sitecustomize.py").write_text(AUDIT.format(marker=str(marker)))
    return marker


LLM_REPLY = '{"dimension_scores": {"clarity": 4, "relevance": 4, "usefulness": 4, "fluency": 4}, "tags": {}}'


@pytest.fixture(scope="module")
def chat_api():
    """A stand-in for the hosted chat API the LLM filters call: every completion says ``LLM_REPLY``;
    ``chat_api.prompts`` holds what it was sent."""

    class Chat(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            prompts.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            message = {"role": "assistant", "content": LLM_REPLY}
            body = json.dumps(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    prompts: list[str] = []
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    api.prompts = prompts
    yield api
    api.shutdown()


def probe_environment(folder: Path, api_port: int) -> dict[str, str]:
    """This process's environment with the probe's ``sitecustomize`` on the path, and the chat API
    (for the LLM operators) at ``api_port``."""
    paths = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": paths, "OPENAI_API_KEY": "unused"} | {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{api_port}/v1"
    }


@pytest.fixture(scope="module")
def server(probe_marker, chat_api):
    """A server on a free port with its token, a 1 MiB body limit and at most ``MAX_ROWS`` rows;
    ``PROBE`` is watched for there, and its LLM operators call ``chat_api``."""
    port = free_port()
    command = [sys.executable, "-m", "trinity.buffer.data_juicer", "--port", str(port), "--max-request-mb", "1"]
    environment = probe_environment(probe_marker.parent, chat_api.server_port) | {TOKEN_ENV: TOKEN}
    process = subprocess.Popen(command + ["--max-rows", str(MAX_ROWS)], env=environment)
    deadline = time.monotonic() + 120
    while True:
        try:
            request(port, "GET", "/health")
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
    yield port
    process.terminate()
    process.wait(timeout=30)


FORKS = """import json, sys
from trinity.buffer.data_juicer import RecipeRunner
forks = []
sys.addaudithook(lambda event, args: forks.append(event) if event in ("os.fork", "os.posix_spawn") else None)
for processes in (1, 2):
    operator = {"text_length_filter": {"min_len": 2, "num_proc": processes}}
    runner, before = RecipeRunner("forks", {"process": [operator], "np": 1}), len(forks)
    kept = runner.run([{"text": "a line"}, {"text": "x"}] * 64)
    print(json.dumps({"processes": processes, "kept": len(kept), "forks": len(forks) - before}))
"""


def test_an_operator_given_one_process_runs_in_this_one():
    """``datasets`` forks a pool for any ``num_proc`` of 1 or more: an operator Data-Juicer gives
    one process runs in the caller's (0.015 s for these 128 rows against 0.5 s with the pool); one
    given two still gets its pool (the audit hook sees its forks)."""
    done = subprocess.run([sys.executable, "-c", FORKS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    one, two = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert one == {"processes": 1, "kept": 64, "forks": 0}, one
    assert two["kept"] == 64 and two["forks"] > 0, two


def test_an_auto_started_server_runs_the_recipe_and_stops_with_its_client(monkeypatch):
    port = free_port()
    client = RecipeClient("test", RECIPE, DataJuicerServiceConfig(auto_start=True, port=port))
    try:
        kept = client.run(ROWS)
        assert [row["i"] for row in kept] == [0] and kept[0]["__dj__stats__"]["text_len"] == 11
        assert client.token not in " ".join(client.process.args)  # through the environment, not ps
        assert post(port, {"recipe": RECIPE, "rows": ROWS}, token=None)[0] == 401
        monkeypatch.setenv(TOKEN_ENV, client.token)  # a second client of the same server
        other = RecipeClient("other", RECIPE, DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}/"))
        assert [row["i"] for row in other.run(ROWS)] == [0]
        with pytest.raises(DataJuicerError, match="^bad: process.0.no_such_op: not an allowed operator"):
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


def test_the_server_needs_its_token(server, monkeypatch):
    assert request(server, "GET", "/health")[0] == 200  # open: a client's start probe
    status, reply = post(server, {"recipe": RECIPE, "rows": ROWS}, token=None)
    assert status == 401 and "Authorization: Bearer" in reply["error"]["message"]
    assert post(server, {"recipe": RECIPE, "rows": ROWS}, token="wrong")[0] == 401
    assert post(server, {"recipe": RECIPE, "rows": ROWS})[0] == 200
    status, schema = request(server, "GET", "/openapi.json", Authorization=f"Bearer {TOKEN}")
    assert status == 200 and "/process" in schema["paths"]
    # a page whose own name resolves to 127.0.0.1 (DNS rebinding) is not this server
    assert post(server, {"recipe": RECIPE, "rows": ROWS}, Host="attacker.example")[0] == 403
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(DataJuicerError, match=rf"^test: a valid token is required.*\${TOKEN_ENV}"):
        RecipeClient("test", RECIPE, DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{server}"))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    RecipeClient("test", RECIPE, DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{server}"))


def test_a_recipe_that_data_juicers_parser_cannot_read_names_why():
    """Its config parser (jsonargparse) exits on what it cannot read: a DataJuicerError, not an exit."""
    with pytest.raises(DataJuicerError, match='^recipe: Data-Juicer rejects the recipe \\(Parser key "process"'):
        RecipeRunner("recipe", {"process": [{"\x7f": None}]})


def test_the_server_takes_json_only(server):
    """A web page may post text/plain anywhere without the browser asking first."""
    status, reply = post(server, json.dumps({"recipe": RECIPE, "rows": ROWS}).encode(), Content_Type="text/plain")
    assert status == 415 and "application/json" in reply["error"]["message"]


def test_a_refused_request_leaves_the_recipe_cache_as_it_was(server):
    """A recipe that loads but fails on the rows is a 400, and not kept (it was, before)."""
    loads = {"process": [{"text_length_filter": {"min_len": 12345}}], "np": 1}
    before = request(server, "GET", "/health")[1]["recipes"]
    assert before < MAX_RECIPES
    status, reply = post(server, {"recipe": loads, "rows": [{"text": 1}, {"text": "mixed types"}]})
    assert status == 400 and reply["error"]["param"] == "rows"
    assert request(server, "GET", "/health")[1]["recipes"] == before
    assert post(server, {"recipe": loads, "rows": ROWS})[0] == 200
    assert request(server, "GET", "/health")[1]["recipes"] == before + 1


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"recipe": {', 400, "the body is not JSON"),
        ({"rows": []}, 422, "recipe: Field required"),
        ({"recipe": RECIPE, "rows": "text"}, 422, "rows: Input should be a valid list"),
        ({"recipe": RECIPE, "rows": [1]}, 422, "rows.0: Input should be a valid dictionary"),
        ({"recipe": RECIPE, "rows": [], "extra": 1}, 422, "extra: Extra inputs are not permitted"),
        (
            {"recipe": {"process": "text_length_filter"}, "rows": []},
            422,
            "recipe.process: Input should be a valid list",
        ),
        (
            {"recipe": {**RECIPE, "temp_dir": "/tmp"}, "rows": []},
            422,
            "recipe.temp_dir: Extra inputs are not permitted",
        ),
        ({"recipe": {"process": [{"a_filter": {}, "b_filter": {}}]}, "rows": []}, 422, "recipe.process.0: "),
        ({"recipe": {"process": [{"no_such_op": {}}]}, "rows": []}, 400, "process.0.no_such_op: not an allowed"),
        ({"recipe": {"process": [{"\x7f": None}]}, "rows": []}, 400, "process.0.\x7f: not an allowed operator"),
    ],
)
def test_a_malformed_request_is_a_4xx_naming_the_field(server, body, status, message):
    got, reply = post(server, body)
    assert got == status and message in reply["error"]["message"]


CODE = {  # what names the refusal: the recipe's operators, given the file that running them writes
    "process.0.python_lambda_mapper: not an allowed operator": lambda marker: [
        {"python_lambda_mapper": {"lambda_str": f"lambda s: (open({str(marker)!r}, 'w').close(), s)[1]"}}
    ],
    "process.0.general_fused_op: not an allowed operator": lambda marker: [
        {"general_fused_op": {"fused_op_list": [{"python_file_mapper": {"file_path": str(marker)}}]}}
    ],
    "process.0.text_chunk_mapper.trust_remote_code: not an allowed argument": lambda marker: [
        {"text_chunk_mapper": {"trust_remote_code": True}}
    ],
    "process.1.remove_repeat_sentences_mapper.tokenizer: not an allowed argument": lambda marker: [
        {"text_length_filter": {"min_len": 1}},
        {"remove_repeat_sentences_mapper": {"tokenizer": f"lambda t: (open({str(marker)!r}, 'w').close(), [t])[1]"}},
    ],
}


@pytest.mark.parametrize("named", CODE)
def test_operators_that_execute_code_are_refused(server, tmp_path, named):
    marker = tmp_path / "ran"
    body = {"recipe": {"process": CODE[named](marker)}, "rows": [{"text": "some text. some text."}]}
    status, reply = post(server, body)
    assert status == 400 and reply["error"]["message"].startswith(named)
    assert "--allow-code-ops" in reply["error"]["message"] and not marker.exists()


def test_custom_operator_files_are_not_imported(server, tmp_path):
    marker, module = tmp_path / "ran", tmp_path / "trinity_test_custom_op.py"
    module.write_text(f"open({str(marker)!r}, 'w').close()\n")
    recipe_ = {**RECIPE, "custom_operator_paths": [str(module)]}
    status, reply = post(server, {"recipe": recipe_, "rows": []})
    assert status == 400 and reply["error"]["message"].startswith("custom_operator_paths: Python files")
    assert not marker.exists()


def test_code_operators_run_on_a_server_started_with_the_opt_in(monkeypatch):
    lambda_op = {"python_lambda_mapper": {"lambda_str": "lambda s: {**s, 'text': s['text'].upper()}"}}
    code_recipe = recipe("test", [lambda_op], num_process=1)
    client = RecipeClient("test", code_recipe, DataJuicerServiceConfig(auto_start=True, allow_code_ops=True))
    try:
        assert "--allow-code-ops" in client.process.args
        assert [row["text"] for row in client.run(ROWS)] == ["LONG ENOUGH", "NO"]
        monkeypatch.setenv(TOKEN_ENV, client.token)
        with pytest.raises(DataJuicerError, match=r"^service.data_juicer.allow_code_ops: sets up the server trinity"):
            RecipeClient("test", code_recipe, DataJuicerServiceConfig(server_url=client.url, allow_code_ops=True))
    finally:
        client.close()


def test_a_recipe_files_own_input_and_output_are_left_out(server):
    """A standalone recipe names its job's files; on the service the rows come and go with the request."""
    job = {"project_name": "p", "dataset_path": "/no/such/input.jsonl", "export_path": "/no/such/out.jsonl"}
    status, reply = post(server, {"recipe": {**RECIPE, **job}, "rows": ROWS})
    assert status == 200 and [row["i"] for row in reply["rows"]] == [0]


def test_the_recipe_cache_is_bounded(server):
    for min_len in range(10):  # ten recipes: the cache keeps the last eight
        assert (
            post(
                server,
                {"recipe": recipe("t", [{"text_length_filter": {"min_len": min_len}}], num_process=1), "rows": []},
            )[0]
            == 200
        )
    health = request(server, "GET", "/health")[1]
    assert health["recipes"] == health["max_recipes"] == 8


def test_bodies_and_rows_are_bounded(server):
    big = {"recipe": RECIPE, "rows": [{"text": "x" * (1 << 20)}]}
    status, reply = post(server, big)
    assert status == 413 and "limit of 1048576 bytes" in reply["error"]["message"]
    status, reply = post(server, {"recipe": RECIPE, "rows": [{"text": "text"}] * (MAX_ROWS + 1)})
    assert status == 422 and reply["error"]["param"] == "rows"
    assert f"at most {MAX_ROWS} items" in reply["error"]["message"] and "--max-rows" in reply["error"]["message"]


def test_a_server_off_loopback_needs_a_token():
    environment = {name: value for name, value in os.environ.items() if name != TOKEN_ENV}
    command = [sys.executable, "-m", "trinity.buffer.data_juicer", "--host", "0.0.0.0", "--port", str(free_port())]
    try:
        ended = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the server started on 0.0.0.0 without a token")
    assert ended.returncode != 0 and f"without a token: set {TOKEN_ENV}" in ended.stderr


def test_a_body_without_its_length_is_bounded_as_it_arrives(server):
    body = json.dumps({"recipe": RECIPE, "rows": [{"text": "x" * (1 << 21)}]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    chunks = (body[start : start + 65536] for start in range(0, len(body), 65536))
    try:
        connection.request("POST", "/process", body=chunks, headers=headers, encode_chunked=True)
    except OSError:  # the server answered and closed before the whole body was sent
        pass
    response = connection.getresponse()
    assert response.status == 413 and "limit of 1048576 bytes" in json.loads(response.read())["error"]["message"]


def installed_operators() -> dict[str, type]:
    """Every operator of the installed Data-Juicer, by name."""
    from data_juicer.ops import OPERATORS

    return OPERATORS.modules


def declared_arguments(operator: type) -> set[str]:
    """The named arguments of an operator's constructor."""
    parameters = inspect.signature(operator.__init__).parameters.values()
    return {p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def test_the_allowlist_names_installed_operators_and_arguments_they_declare():
    operators = installed_operators()
    for name, arguments in ALLOWED.items():
        assert name in operators, f"{name} is not an operator of the installed Data-Juicer"
        own = set(arguments.model_fields) - set(OPERATOR_ARGS) - set(FILTER_ARGS)
        assert own <= declared_arguments(operators[name]), (name, own - declared_arguments(operators[name]))


def test_every_other_installed_operator_is_refused_and_nothing_loads(server):
    before = request(server, "GET", "/health")[1]["recipes"]
    others = sorted(set(installed_operators()) - set(ALLOWED))
    assert len(others) > 150  # Data-Juicer 1.6 has 228 operators
    for name in others:
        status, reply = post(server, {"recipe": {"process": [{"text_length_filter": {}}, {name: {}}]}, "rows": ROWS})
        assert status == 400, name
        assert reply["error"]["message"].startswith(f"process.1.{name}: not an allowed operator"), reply
    assert request(server, "GET", "/health")[1]["recipes"] == before


def test_every_argument_outside_the_allowlist_is_refused(server):
    operators = installed_operators()
    refused = 0
    for name, arguments in ALLOWED.items():
        others = declared_arguments(operators[name]) - set(arguments.model_fields)
        for argument in sorted(others | {"trust_remote_code", "stats_export_path", "work_dir"}):
            status, reply = post(server, {"recipe": {"process": [{name: {argument: "x"}}]}, "rows": ROWS})
            message = f"process.0.{name}.{argument}: not an allowed argument of {name}"
            assert status == 400 and reply["error"]["message"].startswith(message), reply
            refused += 1
    assert refused > 3 * len(ALLOWED)


def string_arguments(arguments: type) -> list[tuple[str, object]]:
    """Each argument of an operator that takes a string (alone, in a list or as a dict's value),
    with the way to wrap a string as its value."""
    shapes = (lambda text: text, lambda text: [text], lambda text: {"key": text})
    found = []
    for argument, field in arguments.model_fields.items():
        adapter = TypeAdapter(field.annotation)
        for shape in shapes:
            try:
                adapter.validate_python(shape("text"))
            except ValidationError:
                continue
            found.append((argument, shape))
            break
    return found


PROBE_ROWS = [
    {"text": "One line. One line. Mail a@b.io at http://a.io 1.2.3.4", "score": 1.0, "tag": "a"},
    {"text": "Another, longer line of text\nwith two lines.", "score": 2.0, "tag": "b"},
]


def test_no_string_argument_of_an_allowed_operator_is_evaluated_imported_or_opened(server, probe_marker, chat_api):
    """Each string any allowed operator takes, set to ``PROBE`` while the operator runs on rows:
    the server's audit hook never sees it compiled, imported, opened or run."""
    ran = probed = 0
    for name, arguments in ALLOWED.items():
        for argument, shape in string_arguments(arguments):
            operator = {name: {"num_proc": 1, argument: shape(PROBE)}}
            status, reply = post(server, {"recipe": {"process": [operator], "np": 1}, "rows": PROBE_ROWS})
            assert status in (200, 400), reply
            assert not probe_marker.exists(), f"{name}.{argument}: {probe_marker.read_text()}"
            probed, ran = probed + 1, ran + (status == 200)
    assert probed >= 90 and ran > probed // 3, (probed, ran)
    assert sum(PROBE in prompt for prompt in chat_api.prompts) >= 10  # the LLM filters' prompts were sent


def test_the_probe_sees_the_string_an_operator_evaluates(probe_marker):
    """The audit hook the test above relies on, in a process set up as the server's: the operator
    whose argument let a recipe run a shell command (run in process, where any recipe may)."""
    seen = probe_marker.with_name("seen_in_process")
    code = (
        "from trinity.buffer.data_juicer import RecipeRunner\n"
        f"op = {{'remove_repeat_sentences_mapper': {{'tokenizer': 'lambda text: [{PROBE}]'}}}}\n"
        "RecipeRunner('own', {'process': [op], 'np': 1}).run([{'text': 'a. b.'}])\n"
    )
    environment = probe_environment(probe_marker.parent, free_port()) | {"TRINITY_PROBE_MARKER": str(seen)}
    subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, timeout=300)
    assert seen.read_text().startswith("compile")


def test_docs_security_lists_the_allowlist():
    listed = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    assert all(f"`{name}`" in listed for name in ALLOWED)
    assert f"only\n  these {len(ALLOWED)}" in listed or f"only these {len(ALLOWED)}" in " ".join(listed.split())
