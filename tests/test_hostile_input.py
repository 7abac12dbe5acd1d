"""Hostile input to the JSON API: never a 500, never an unbounded read.

Every JSON endpoint is found from the API's OpenAPI schema, so a new endpoint is covered
without touching this file.
"""

import collections
import dataclasses
import json
import re
import socket
import time

import pytest
import requests
from django.test import Client

from chats.actions import execute_actions, failure_summary
from chats.attachments import attachments_dir
from chats.models import ChatParticipant
from chats.services import chat_create, chat_message_add_system
from core.config import ConfigError, load
from malamar_site.api import api
from tests.conftest import error_of
from tests.htmltree import parse
from tests.live import Server, django_script
from tests.stack import data_dir_from
from tests.test_chats_api import multipart
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

SURROGATE = "\\ud800"  # as it appears in the JSON text: a lone UTF-16 surrogate
NUL = "\\u0000"


def raw_json(client, method: str, path: str, body: bytes | str, **extra):
    data = body.encode() if isinstance(body, str) else body
    return getattr(client, method)(path, data, content_type="application/json", **extra)


@pytest.fixture
def client():
    return Client(raise_request_exception=False)


@pytest.fixture
def ids(workspace, agents, task):
    chat = chat_create(workspace=workspace)
    message = chat_message_add_system(chat=chat, message="hello")
    participant = ChatParticipant.objects.get(chat=chat)
    return {
        "workspace_id": workspace.id,
        "agent_id": agents[0].id,
        "task_id": task.id,
        "chat_id": chat.id,
        "participant_id": participant.id,
        "message_id": message.id,
    }


# --- every JSON endpoint, every string field ------------------------------------------------


def _resolve(schema: dict, components: dict) -> dict:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _takes_text(schema: dict, components: dict) -> bool:
    schema = _resolve(schema, components)
    options = schema.get("anyOf", [schema])
    return any(_resolve(o, components).get("type") == "string" for o in options)


def json_string_fields() -> list[tuple[str, str, str]]:
    """(method, path, field) for each string field of each JSON request body; a free-form
    object body (settings) gets one made-up field."""
    schema = api.get_openapi_schema()
    components = schema.get("components", {}).get("schemas", {})
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            body = _resolve(content["application/json"]["schema"], components)
            properties = body.get("properties")
            if properties is None:
                found.append((method, path, "any_key"))
                continue
            found += [
                (method, path, name)
                for name, field in properties.items()
                if _takes_text(field, components)
            ]
    return found


STRING_FIELDS = json_string_fields()


def test_the_endpoint_list_is_not_empty():
    endpoints = {(method, path) for method, path, _ in STRING_FIELDS}
    assert len(endpoints) >= 10 and len(STRING_FIELDS) >= 15
    assert ("post", "/api/workspaces", "title") in STRING_FIELDS
    assert ("put", "/api/settings", "any_key") in STRING_FIELDS


def _url(path: str, ids: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)


@pytest.mark.parametrize(("method", "path", "field"), STRING_FIELDS)
@pytest.mark.parametrize(("bad", "problem"), [(SURROGATE, "surrogate"), (NUL, "NUL")])
def test_bad_text_in_any_json_string_field_is_a_400(client, ids, method, path, field, bad, problem):
    body = '{"' + field + '": "ok ' + bad + ' ok"}'
    response = raw_json(client, method, _url(path, ids), body)
    assert response.status_code == 400, response.content
    message = error_of(response)["message"]
    assert message.startswith(f"{field}: ") and problem in message


def operation_parameters() -> list[tuple[str, str, str, str]]:
    """(method, path, parameter, where) for each path and query parameter of each operation
    (streams and downloads included): what the JSON-body test above does not reach."""
    schema = api.get_openapi_schema()
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            found += [
                (method, path, parameter["name"], parameter["in"])
                for parameter in operation.get("parameters", [])
                if parameter["in"] in ("path", "query")
            ]
    return found


PARAMETERS = operation_parameters()
HOSTILE_PARAMETER_VALUES = ["a%00b", "%FF%FE", "%ED%A0%80", "x" * 60_000, "-1", "9" * 40, "%0A"]


def test_the_parameter_list_has_path_and_query_parameters():
    kinds = {where for *_, where in PARAMETERS}
    assert kinds == {"path", "query"} and len(PARAMETERS) >= 20
    assert ("get", "/api/tasks/{task_id}/changes/file", "path", "query") in PARAMETERS


@pytest.mark.pg
@pytest.mark.parametrize(("method", "path", "name", "where"), PARAMETERS)
def test_hostile_path_and_query_parameters_are_never_a_500(client, ids, method, path, name, where):
    body = "{}" if method in ("post", "put", "patch") else None
    for value in HOSTILE_PARAMETER_VALUES:
        values = collections.defaultdict(lambda: "n" * 21, ids)  # other ids: no such row
        if where == "path":
            values[name] = value
        url = _url(path, values)
        if where == "query":
            url += f"?{name}={value}"
        response = raw_json(client, method, url, body) if body else getattr(client, method)(url)
        assert response.status_code < 500, (method, url[:120], response.content[:300])
        if response.status_code >= 400 and response.headers["Content-Type"].startswith("app"):
            assert error_of(response)["message"]


def test_bad_text_deep_inside_a_body_names_its_place(client, ids):
    body = '{"cli_settings": {"claude": {"env": {"KEY": "x' + SURROGATE + '"}}}}'
    response = raw_json(client, "put", "/api/settings", body)
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("cli_settings.claude.env.KEY: ")
    body = '{"agent_ids": ["a", "b' + NUL + '"]}'
    response = raw_json(
        client, "put", f"/api/workspaces/{ids['workspace_id']}/agents/reorder", body
    )
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("agent_ids.1: ")
    response = raw_json(client, "put", "/api/settings", '{"k' + SURROGATE + '": 1}')
    assert response.status_code == 400 and "field name" in error_of(response)["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "must be a JSON object"),
        (b'"title"', "must be a JSON object"),
        (b"null", "must be a JSON object"),
        (b'{"title": "\xff\xfe"}', "not valid UTF-8"),
        (b'{"title": ', "not valid JSON"),
        (b'{"title": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (b'{"title": 5}', "title: Input should be a valid string"),
        (b'{"title": "x", "retention_days": "soon"}', "retention_days: "),
        (b'{"title": "x", "colour": "red"}', "colour: is not a known field"),
    ],
)
def test_malformed_bodies_are_a_400_with_a_message(client, body, message):
    response = raw_json(client, "post", "/api/workspaces", body)
    assert response.status_code == 400
    assert message in error_of(response)["message"]
    assert not Workspace.objects.exists()


@pytest.mark.pg
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"retention_days": 100000000000000000000}', "The number 100000000000000000000 is too"),
        (b'{"retention_days": 9223372036854775807}', "retention_days must be a whole number"),
        (b'{"stall_kill_minutes": NaN}', "NaN is not a number in JSON"),
        (b'{"stall_kill_minutes": Infinity}', "Infinity is not a number in JSON"),
        (b'{"stall_kill_minutes": 1e400}', "The number 1e400 is too large"),
        (b'{"stall_kill_minutes": 1e300}', "stall_kill_minutes must be a number of minutes"),
    ],
)
def test_numbers_out_of_range_are_a_400(client, workspace, body, message):
    """A number the database cannot store was a 500; one the daily cleanup cannot turn into a
    date (retention_days) crashed the worker's cleanup job later."""
    response = raw_json(client, "put", f"/api/workspaces/{workspace.id}", body)
    assert response.status_code == 400 and message in error_of(response)["message"]
    assert Workspace.objects.get(id=workspace.id).retention_days == 7


@pytest.mark.pg
def test_an_agent_action_with_an_impossible_number_fails_cleanly(workspace):
    chat = chat_create(workspace=workspace)
    actions = [{"type": "update_workspace", "stall_kill_minutes": float("nan")}]
    (result,) = execute_actions(chat=chat, actions=actions, is_malamar=True)
    assert result.error.startswith("stall_kill_minutes must be a number of minutes")


# --- names and summaries have a maximum length -------------------------------------------


def _limits(ids):
    ws, agent, task, chat = ids["workspace_id"], ids["agent_id"], ids["task_id"], ids["chat_id"]
    return [
        ("post", "/api/workspaces", {}, "title", 200),
        ("put", f"/api/workspaces/{ws}", {}, "title", 200),
        ("post", f"/api/workspaces/{ws}/agents", {"instruction": "Do it"}, "name", 100),
        ("put", f"/api/agents/{agent}", {}, "name", 100),
        ("post", f"/api/workspaces/{ws}/tasks", {}, "summary", 500),
        ("put", f"/api/tasks/{task}", {}, "summary", 500),
        ("post", f"/api/workspaces/{ws}/chats", {}, "title", 200),
        ("put", f"/api/chats/{chat}", {}, "title", 200),
    ]


@pytest.mark.pg
def test_over_long_names_are_a_400_and_the_limit_itself_is_fine(api, ids):
    for method, path, base, field, limit in _limits(ids):
        for length in (50_000, limit + 1):
            response = getattr(api, method)(path, {**base, field: "n" * length})
            assert response.status_code == 400, (path, response.content)
            message = error_of(response)["message"]
            assert message.startswith(f"{field}: ") and str(limit) in message
        longest = f"{method} {path}"[:limit].ljust(limit, "n")  # unique: agent names must be
        response = getattr(api, method)(path, {**base, field: longest})
        assert response.status_code in (200, 201), (path, response.content)
        assert response.json()[field] == longest


@pytest.mark.pg
def test_texts_have_no_length_limit_besides_the_request_size(api, ids):
    long_text = "word " * 200_000  # 1 MB
    response = api.post(f"/api/tasks/{ids['task_id']}/comments", {"content": long_text})
    assert response.status_code == 201 and response.json()["content"] == long_text.strip()
    response = api.put(f"/api/agents/{ids['agent_id']}", {"instruction": long_text})
    assert response.status_code == 200


@pytest.mark.pg
def test_malamar_chat_actions_with_over_long_names_fail_with_a_clear_message(ids, workspace):
    chat = chat_create(workspace=workspace)
    long = "N" * 50_000
    actions = [
        {"type": "create_agent", "name": long, "instruction": "x", "cli_type": "claude"},
        {"type": "update_agent", "agent_id": ids["agent_id"], "name": long},
        {"type": "update_workspace", "title": long},
        {"type": "create_task", "summary": long},
        {"type": "rename_chat", "title": long},
        {"type": "create_task", "summary": "A fine task"},
    ]
    results = execute_actions(chat=chat, actions=actions, is_malamar=True)
    errors = [r.error for r in results]
    assert errors == [
        "Name must be at most 100 characters (it has 50000)",
        "Name must be at most 100 characters (it has 50000)",
        "Title must be at most 200 characters (it has 50000)",
        "Summary must be at most 500 characters (it has 50000)",
        "Title must be at most 200 characters (it has 50000)",
        None,
    ]
    summary = failure_summary(results)
    assert summary.splitlines()[0] == (
        "Action failed: create_agent - Name must be at most 100 characters (it has 50000)"
    )
    assert workspace.tasks.filter(summary="A fine task").exists()


# --- attachments -----------------------------------------------------------------------


@pytest.fixture
def temp_dir(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "ending"),
    [("a" * 1_000 + ".txt", ".txt"), ("é" * 1_000 + ".txt", "….txt"), ("z" * 5_000, "z")],
)
def test_long_attachment_names_are_shortened_not_refused(client, ids, temp_dir, name, ending):
    """Names of ~1,000+ characters made the upload fail (Django reads 1 KB of part headers)."""
    body, content_type = multipart([(name, b"hi")])
    response = client.post(
        f"/api/chats/{ids['chat_id']}/attachments", body, content_type=content_type
    )
    assert response.status_code == 201, response.content
    (stored,) = attachments_dir(ids["chat_id"]).iterdir()
    assert stored.read_bytes() == b"hi"
    assert stored.name.endswith(ending) and len(stored.name.encode()) <= 255
    assert name.startswith(stored.name[:100])
    assert response.json()["messages"][0]["message"].endswith(stored.name)


# --- request size -------------------------------------------------------------------------


def _limit(settings, **limits):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, **limits)
    if "max_json_bytes" in limits:
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = limits["max_json_bytes"]


def test_a_3_mb_body_is_accepted_by_default(api, workspace):
    description = "d" * 3_000_000
    response = api.put(f"/api/workspaces/{workspace.id}", {"description": description})
    assert response.status_code == 200
    assert Workspace.objects.get(id=workspace.id).description == description


def test_a_json_body_over_the_limit_is_a_413(api, workspace, settings):
    _limit(settings, max_json_bytes=64 * 1024)
    response = api.put(f"/api/workspaces/{workspace.id}", {"description": "d" * 70_000})
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    assert error["message"] == (
        "The request is too large: at most 64 KB per request (MALAMAR_MAX_JSON_BYTES)"
    )
    assert Workspace.objects.get(id=workspace.id).description == "Build things"


def test_a_body_longer_than_django_reads_is_a_413_too(api, workspace, settings):
    """A body that grows past the limit without declaring it (chunked) hits Django's own
    limit: the same 413, never a 500."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    response = api.put(f"/api/workspaces/{workspace.id}", {"description": "d" * 5_000})
    assert response.status_code == 413 and error_of(response)["code"] == "PAYLOAD_TOO_LARGE"


def test_an_upload_over_its_limit_is_a_413(client, ids, temp_dir, settings):
    _limit(settings, max_upload_bytes=32 * 1024)
    body, content_type = multipart([("big.bin", b"x" * 40_000)])
    url = f"/api/chats/{ids['chat_id']}/attachments"
    response = client.post(url, body, content_type=content_type)
    assert response.status_code == 413
    assert "MALAMAR_MAX_UPLOAD_BYTES" in error_of(response)["message"]
    assert not attachments_dir(ids["chat_id"]).exists()
    body, content_type = multipart([("small.bin", b"x" * 20_000)])  # the JSON limit is apart
    assert client.post(url, body, content_type=content_type).status_code == 201


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("MALAMAR_MAX_JSON_BYTES", "2048")
    monkeypatch.setenv("MALAMAR_MAX_UPLOAD_BYTES", "4096")
    config = load()
    assert (config.max_json_bytes, config.max_upload_bytes) == (2048, 4096)
    monkeypatch.setenv("MALAMAR_MAX_JSON_BYTES", "ten")
    with pytest.raises(ConfigError, match="MALAMAR_MAX_JSON_BYTES"):
        load()
    monkeypatch.delenv("MALAMAR_MAX_JSON_BYTES")
    monkeypatch.delenv("MALAMAR_MAX_UPLOAD_BYTES")
    config = load()
    assert (config.max_json_bytes, config.max_upload_bytes) == (10 * 2**20, 100 * 2**20)


# --- query parameters ----------------------------------------------------------------------


@pytest.mark.pg
def test_huge_and_nul_query_parameters(client, ids, workspace):
    huge = "a" * 60_000
    for path in ("/api/workspaces", f"/api/workspaces/{workspace.id}/chats"):
        response = client.get(path, {"q": huge})
        assert response.status_code == 200
        assert next(iter(response.json().values())) == []
        response = client.get(f"{path}?q=Pro%00ject")
        assert response.status_code == 400
        assert error_of(response)["message"] == "q: contains a NUL character"
    assert [w["id"] for w in client.get("/api/workspaces", {"q": "project"}).json()["workspaces"]]
    response = client.get(f"/api/workspaces/{workspace.id}/tasks?status=to%00do")
    assert response.status_code == 400
    response = client.get(f"/api/workspaces/{workspace.id}/usage?days=99999999999999999999")
    assert response.status_code == 200


# --- against a real server: refused before the body is read ---------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory, template_db):
    data_dir = data_dir_from(template_db, tmp_path_factory.mktemp("hostile-live"))
    server = Server(data_dir, MALAMAR_MAX_JSON_BYTES=64 * 1024).start()
    yield server
    server.stop()


def raw_request(server: Server, head: str, body: bytes = b"", timeout: float = 10) -> tuple:
    """Send `head` (+ the start of a body) and read until the server closes the connection.
    Returns (status, headers, body, seconds until the answer was complete)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(timeout)
    started = time.monotonic()
    sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    head_part, _, payload = answer.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, payload, elapsed


GIGABYTE = 1_000_000_000


def test_a_declared_gigabyte_is_refused_at_once_without_reading_it(live):
    head = (
        "POST /api/workspaces HTTP/1.1\nHost: 127.0.0.1\n"
        f"Content-Type: application/json\nContent-Length: {GIGABYTE}\n"
    )
    status, headers, payload, elapsed = raw_request(live, head, b'{"title": "x')
    assert status == 413 and elapsed < 3
    assert headers["Connection"] == "close"
    assert json.loads(payload)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    # a page form post gets the same, as the error toast for htmx
    head = (
        "POST /workspaces/new/ HTTP/1.1\nHost: 127.0.0.1\nHX-Request: true\n"
        f"Content-Type: application/x-www-form-urlencoded\nContent-Length: {GIGABYTE}\n"
    )
    status, headers, payload, elapsed = raw_request(live, head, b"title=")
    assert status == 413 and elapsed < 3 and headers["HX-Reswap"] == "none"
    toast = json.loads(headers["HX-Trigger"])["malamar:toast"]
    assert toast["level"] == "error" and "MALAMAR_MAX_JSON_BYTES" in toast["message"]
    # and the server goes on answering
    assert requests.get(f"{live.url}/api/health", timeout=5).status_code == 200


def test_a_plain_form_post_over_the_limit_gets_a_page(live):
    head = (
        "POST /workspaces/new/ HTTP/1.1\nHost: 127.0.0.1\n"
        f"Content-Type: application/x-www-form-urlencoded\nContent-Length: {GIGABYTE}\n"
    )
    status, headers, payload, elapsed = raw_request(live, head, b"title=")
    assert status == 413 and elapsed < 3
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == "default-src 'none'"
    assert int(headers["Content-Length"]) == len(payload)
    page = parse(payload.decode())
    assert page.find(tag="h1").text == "Content Too Large"
    assert "MALAMAR_MAX_JSON_BYTES" in page.text


def test_a_chunked_body_is_cut_off_at_the_limit(live):
    head = (
        "POST /api/workspaces HTTP/1.1\nHost: 127.0.0.1\n"
        "Content-Type: application/json\nTransfer-Encoding: chunked\n"
    )
    chunk = b"a" * 16_384
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(6))  # 96 KB
    status, _, payload, _ = raw_request(live, head, body)
    assert status == 413 and json.loads(payload)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    small = b'{"title": "Chunked"}'
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(small), small)
    status, _, payload, _ = raw_request(live, head + "Connection: close\n", body)
    assert status == 201 and json.loads(payload)["title"] == "Chunked"


def test_with_a_password_credentials_are_checked_before_the_body_is_read(live):
    token = django_script(
        live.data_dir,
        "from core.auth import password_set, token_create\n"
        "password_set(raw='a long password')\n"
        "print(token_create(name='script')[1])",
    ).stdout.strip()
    try:
        head = (
            "POST /api/workspaces HTTP/1.1\nHost: 127.0.0.1\n"
            "Content-Type: application/json\nContent-Length: 60000\n"
        )
        status, _, payload, elapsed = raw_request(live, head, b'{"title": "x')
        assert status == 401 and elapsed < 3
        assert json.loads(payload)["error"]["code"] == "UNAUTHORIZED"
        page = (
            "POST /workspaces/new/ HTTP/1.1\nHost: 127.0.0.1\n"
            "Content-Type: application/x-www-form-urlencoded\nContent-Length: 60000\n"
        )
        status, headers, _, elapsed = raw_request(live, page, b"title=")
        assert status == 302 and elapsed < 3
        assert headers["Location"] == "/login/?next=/workspaces/new/"
        # a whole small body changes nothing: still refused, never handled
        status, _, _, _ = raw_request(live, head.replace("60000", "17"), b'{"title": "Evil"}')
        assert status == 401
        # a client waiting for "100 Continue" never gets it without credentials...
        status, _, _, _ = raw_request(live, head + "Expect: 100-continue\n")
        assert status == 401
        # ...and gets it with them, then sends its body
        with socket.create_connection(("127.0.0.1", live.port)) as sock:
            sock.settimeout(10)
            body = b'{"title": "Continued"}'
            sock.sendall(
                (
                    "POST /api/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                    f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
                ).encode()
            )
            assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(body)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 201 ")
        # with a token the same request goes through
        created = requests.post(
            f"{live.url}/api/workspaces",
            json={"title": "Signed"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=5,
        )
        assert created.status_code == 201
        titles = requests.get(
            f"{live.url}/api/workspaces", headers={"Authorization": f"Bearer {token}"}, timeout=5
        ).json()["workspaces"]
        assert "Evil" not in [w["title"] for w in titles]
    finally:
        django_script(live.data_dir, "from core.auth import password_set; password_set(raw=None)")


@pytest.mark.pg
def test_a_malamar_reply_with_over_long_names_becomes_a_clear_system_message(stack):
    from tests.test_chat_worker import action, chat, send, wait_reply

    ws = stack.workspace()
    c = chat(stack, ws)
    long = "N" * 50_000
    send(
        stack,
        c,
        "Set things up",
        "@fake reply Done.",
        action(type="create_agent", name=long, instruction="Review code."),
        action(type="create_task", summary=long),
        action(type="create_task", summary="Short one"),
    )
    reply, note = wait_reply(stack, c, count=2)["messages"][-2:]
    assert (reply["role"], reply["message"]) == ("agent", "Done.")
    assert [a["result"] for a in reply["actions"]] == ["failed", "failed", "ok"]
    assert note["role"] == "system"
    assert note["message"].splitlines() == [
        "Action failed: create_agent - Name must be at most 100 characters (it has 50000)",
        "Action failed: create_task - Summary must be at most 500 characters (it has 50000)",
    ]
    assert stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"] == []
    tasks = stack.api("GET", f"/workspaces/{ws['id']}/tasks")["tasks"]
    assert [t["summary"] for t in tasks] == ["Short one"]


# --- what agents' CLIs print is hostile input too -------------------------------------------


@pytest.mark.pg
def test_cli_output_strings_are_made_storable_and_deep_nesting_is_invalid_json():
    from core.storable import loads_storable
    from runner.clis import cli_for
    from runner.streams import parse_line

    data = loads_storable('{"content": "a\\ud800b\\u0000c", "k\\udfff": ["\\ud83d\\ude00"]}')
    assert data == {"content": "a\ufffdbc", "k\ufffd": ["\U0001f600"]}  # a real pair stays
    with pytest.raises(ValueError, match="nested more than 200 levels deep"):
        loads_storable("[" * 100_000 + "]" * 100_000)
    parser = cli_for("claude").stream_parser()
    assert parse_line(parser, '{"type": ' + "[" * 100_000 + "]" * 100_000 + "}") == []


@pytest.mark.pg
def test_an_agent_comment_with_a_lone_surrogate_is_stored_not_a_crashed_run(stack):
    ws = stack.workspace(agents=[("Planner", "gemini")])
    escaped = (
        '{"actions": [{"type": "comment", "content": "bad \\ud800 text\\u0000"},'
        ' {"type": "change_status", "status": "in_review"}]}'
    )
    task = stack.task(ws, f"@fake Planner: json {escaped}")
    comment = stack.wait_comments(task, 1)[0]
    assert (comment["author_type"], comment["content"]) == ("agent", "bad \ufffd text")
    stack.wait_status(task, "in_review")
    nested = "@fake Planner: json " + "[" * 50_000 + "]" * 50_000
    task = stack.task(ws, nested, summary="Nested")
    comment = stack.wait_comments(task, 1)[0]
    assert comment["author_type"] == "system"
    assert comment["content"].startswith(
        "CLI output was not valid JSON: nested more than 200 levels deep"
    )


@pytest.mark.pg
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_nul_bytes_a_cli_prints_are_dropped_where_they_are_kept(stack, cli):
    # PostgreSQL refuses NUL in text: a CLI printing one must not crash the run's recording.
    ws = stack.workspace(agents=[("Planner", cli)])
    task = stack.task(ws, "@fake Planner: nul 3 exit 1 gave up")
    comment = stack.wait_comments(task, 1)[0]
    assert comment["author_type"] == "system"
    assert "\x00" not in json.dumps(stack.comments(task) + stack.logs(task))
    stack.wait_idle()
    assert stack.worker_alive()
    task = stack.task(ws, "@fake Planner: nul 2 comment fine", summary="Then")
    assert stack.wait_comments(task, 1)[0]["content"] == "fine"
