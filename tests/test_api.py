"""The JSON API: shapes, status codes, error bodies and cross-site protections."""

import pytest

from tasks.models import Task
from tests.conftest import ApiClient, error_of
from tests.failures import fail_task
from tests.stack import FAKES_BIN

FAKE_CLAUDE = str(FAKES_BIN / "claude")


@pytest.mark.pg
def test_workspace_crud_and_search(api):
    created = api.post("/api/workspaces", {"title": "Alpha site", "description": "d"})
    assert created.status_code == 201
    ws = created.json()
    assert ws["title"] == "Alpha site" and len(ws["id"]) == 21
    api.post("/api/workspaces", {"title": "Beta"})
    listed = api.get("/api/workspaces").json()
    assert set(listed) == {"workspaces"} and len(listed["workspaces"]) == 2
    found = api.get("/api/workspaces?q=alpha").json()["workspaces"]
    assert [w["id"] for w in found] == [ws["id"]]
    updated = api.put(
        f"/api/workspaces/{ws['id']}", {"retention_days": 3, "notify_on_error": "off"}
    )
    assert updated.status_code == 200 and updated.json()["retention_days"] == 3
    assert api.get(f"/api/workspaces/{ws['id']}").json()["notify_on_error"] == "off"
    assert api.delete(f"/api/workspaces/{ws['id']}").status_code == 204
    assert api.get(f"/api/workspaces/{ws['id']}").status_code == 404


def test_agents_endpoints(api, workspace):
    base = f"/api/workspaces/{workspace.id}/agents"
    a = api.post(base, {"name": "Planner", "instruction": "Plan", "cli_type": "gemini"})
    assert a.status_code == 201 and a.json()["order"] == 1
    b = api.post(base, {"name": "Coder", "instruction": "Code"}).json()
    assert b["cli_type"] == "claude" and b["order"] == 2
    dup = api.post(base, {"name": "Planner", "instruction": "again"})
    assert dup.status_code == 409 and error_of(dup)["code"] == "CONFLICT"
    reordered = api.put(f"{base}/reorder", {"agent_ids": [b["id"], a.json()["id"]]})
    assert [x["name"] for x in reordered.json()["agents"]] == ["Coder", "Planner"]
    bad = api.put(f"{base}/reorder", {"agent_ids": [b["id"]]})
    assert bad.status_code == 400 and "agent_ids" in error_of(bad)["message"]
    assert api.put(f"/api/agents/{b['id']}", {"instruction": "Code well"}).status_code == 200
    assert [x["name"] for x in api.get(base).json()["agents"]] == ["Coder", "Planner"]
    assert api.delete(f"/api/agents/{b['id']}").status_code == 204
    assert api.delete(f"/api/agents/{b['id']}").status_code == 404


def test_task_endpoints(api, workspace):
    base = f"/api/workspaces/{workspace.id}/tasks"
    created = api.post(base, {"summary": "Write docs", "description": "All of them"})
    assert created.status_code == 201
    task = created.json()
    assert task["status"] == "todo"
    assert (task["is_priority"], task["comment_count"], task["is_processing"]) == (False, 0, False)
    tid = task["id"]
    comment = api.post(f"/api/tasks/{tid}/comments", {"content": "Use **markdown**"})
    assert comment.status_code == 201
    assert comment.json()["author_name"] == "User"
    assert comment.json()["user_id"] == "0" * 21
    assert api.get(f"/api/tasks/{tid}").json()["comment_count"] == 1
    comments = api.get(f"/api/tasks/{tid}/comments").json()
    assert (
        set(comments) == {"comments"} and comments["comments"][0]["content"] == "Use **markdown**"
    )
    logs = api.get(f"/api/tasks/{tid}/logs").json()["logs"]
    assert [log["event_type"] for log in logs] == ["task_created", "comment_added"]
    assert api.post(f"/api/tasks/{tid}/prioritize").json()["is_priority"] is True
    assert api.post(f"/api/tasks/{tid}/prioritize").json()["is_priority"] is False
    moved = api.put(f"/api/tasks/{tid}", {"status": "done"})
    assert moved.status_code == 409 and "Todo" in error_of(moved)["message"]
    cancel = api.post(f"/api/tasks/{tid}/cancel")
    assert cancel.status_code == 409
    assert api.put(f"/api/tasks/{tid}", {"summary": "Write all docs"}).json()["summary"] == (
        "Write all docs"
    )
    assert api.get(base).json()["tasks"][0]["id"] == tid
    assert api.delete(f"/api/tasks/{tid}").status_code == 204
    assert api.get(f"/api/tasks/{tid}").status_code == 404


def test_task_status_move_and_done_cleanup(api, task):
    Task.objects.filter(id=task.id).update(status="in_review")
    assert api.put(f"/api/tasks/{task.id}", {"status": "done"}).json()["status"] == "done"
    deleted = api.delete(f"/api/workspaces/{task.workspace_id}/tasks/done")
    assert deleted.json() == {"deleted": 1}


def test_cancel_running_task(api, task):
    Task.objects.filter(id=task.id).update(status="in_progress")
    response = api.post(f"/api/tasks/{task.id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "in_review"
    contents = [c["content"] for c in api.get(f"/api/tasks/{task.id}/comments").json()["comments"]]
    assert contents == ["Task cancelled by user"]


def test_a_failing_task_retry_now_and_stop_retrying(api, task):
    Task.objects.filter(id=task.id).update(status="in_progress")
    task.refresh_from_db()
    url = f"/api/tasks/{task.id}"
    assert error_of(api.post(f"{url}/retry"))["message"].startswith("Only a Todo or In Progress")
    assert api.post(f"{url}/stop-retrying").status_code == 409
    fail_task(task, "CLI exited with code 1. 401")
    body = api.get(url).json()
    assert body["failure_streak"] == 1 and body["retry_not_before"] is not None
    comments = api.get(f"{url}/comments").json()["comments"]
    assert [(c["author_type"], c["kind"]) for c in comments] == [("system", "error")]
    retried = api.post(f"{url}/retry")
    assert retried.status_code == 200
    assert (retried.json()["failure_streak"], retried.json()["retry_not_before"]) == (1, None)
    stopped = api.post(f"{url}/stop-retrying")
    assert stopped.status_code == 200
    assert (stopped.json()["status"], stopped.json()["failure_streak"]) == ("todo", 1)
    assert api.post("/api/tasks/nope/retry").status_code == 404


@pytest.mark.parametrize(
    "body,needle",
    [
        ({}, "summary"),
        ({"summary": ""}, "Summary"),
        ({"summary": "x", "priority": 1}, "priority"),
        ({"summary": 5}, "summary"),
    ],
)
def test_validation_errors_name_the_field(api, workspace, body, needle):
    response = api.post(f"/api/workspaces/{workspace.id}/tasks", body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "VALIDATION_ERROR" and needle in error["message"]


def test_invalid_json_is_a_400(api, workspace):
    response = api.client.post(
        f"/api/workspaces/{workspace.id}/tasks", "{nope", content_type="application/json"
    )
    assert response.status_code == 400 and error_of(response)["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    "path", ["/api/workspaces/nope", "/api/tasks/nope", "/api/tasks/nope/comments", "/api/x"]
)
def test_not_found_is_json(api, path):
    response = api.get(path)
    assert response.status_code == 404 and error_of(response)["code"] == "NOT_FOUND"


def test_method_not_allowed_is_json(api):
    response = api.client.patch("/api/workspaces")
    assert response.status_code == 405 and error_of(response)["code"] == "METHOD_NOT_ALLOWED"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_non_json_bodies_get_415(api, workspace, content_type):
    response = api.client.post(
        f"/api/workspaces/{workspace.id}/tasks", "summary=x", content_type=content_type
    )
    assert response.status_code == 415
    assert error_of(response)["code"] == "UNSUPPORTED_MEDIA_TYPE"
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_ORIGIN": "http://evil.example"},
        {"HTTP_ORIGIN": "http://localhost:8080"},
        {"HTTP_ORIGIN": "null"},
        {"HTTP_SEC_FETCH_SITE": "cross-site"},
        {"HTTP_SEC_FETCH_SITE": "same-site"},
    ],
)
def test_cross_site_state_changes_get_403(api, workspace, headers):
    response = api.post(f"/api/workspaces/{workspace.id}/tasks", {"summary": "pwn"}, **headers)
    assert response.status_code == 403 and error_of(response)["code"] == "FORBIDDEN"
    assert not Task.objects.exists()


def test_same_origin_and_non_browser_clients_allowed(api, workspace):
    same = api.post(
        f"/api/workspaces/{workspace.id}/tasks",
        {"summary": "ok"},
        HTTP_ORIGIN="http://testserver",
        HTTP_SEC_FETCH_SITE="same-origin",
    )
    assert same.status_code == 201
    assert api.post(f"/api/workspaces/{workspace.id}/tasks", {"summary": "curl"}).status_code == 201


def test_cross_site_reads_are_not_state_changes(api, workspace):
    assert api.get("/api/workspaces", HTTP_ORIGIN="http://evil.example").status_code == 200


def test_rebinding_host_header_is_refused(db):
    response = ApiClient(HTTP_HOST="attacker.example").get("/api/workspaces")
    assert response.status_code == 400
    assert error_of(response)["code"] == "BAD_HOST"


def test_settings_api_masks_and_merges(api):
    response = api.put(
        "/api/settings",
        {
            "mailgun_api_key": "key-abcdef0123456789",
            "cli_settings": {
                "claude": {"binary_path": FAKE_CLAUDE, "env": {"TOKEN": "t0ps3cr3t-xyz"}}
            },
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert "key-abcdef0123456789" not in response.content.decode()
    assert "t0ps3cr3t-xyz" not in response.content.decode()
    assert body["cli_settings"]["claude"]["binary_path"] == FAKE_CLAUDE
    again = api.put("/api/settings", body)  # a form saving what it loaded
    assert again.status_code == 200
    from core.settings_store import settings_get

    assert settings_get()["cli_settings"]["claude"]["env"]["TOKEN"] == "t0ps3cr3t-xyz"
    bad = api.put("/api/settings", {"cli_settings": {"nope": {}}})
    assert bad.status_code == 400 and "cli_settings.nope" in error_of(bad)["message"]


def test_health_endpoints(api):
    assert api.get("/api/health").json()["status"] == "ok"
    clis = api.get("/api/health/cli").json()["clis"]
    assert [c["cli_type"] for c in clis] == ["claude", "gemini", "codex", "opencode"]
    assert {c["status"] for c in clis} == {"not_checked"}
    refreshed = api.post("/api/health/cli/refresh")
    assert refreshed.status_code == 202
    assert all(c["refresh_requested_at"] for c in refreshed.json()["clis"])


def test_openapi_docs(api):
    assert api.get("/api/docs").status_code == 200
    schema = api.get("/api/openapi.json").json()
    assert "/api/workspaces/{workspace_id}/tasks" in schema["paths"]


def test_unexpected_errors_are_json_500(api, workspace, monkeypatch):
    from tasks import services

    def boom(**kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(services, "task_create", boom)
    api.client.raise_request_exception = False
    response = api.post(f"/api/workspaces/{workspace.id}/tasks", {"summary": "x"})
    assert response.status_code == 500
    assert error_of(response) == {"code": "INTERNAL_ERROR", "message": "Internal server error"}


# --- settings: the API refuses what the pages refuse ----------------------------------------

NOTIFY_FORM = {
    "mailgun_api_key": "",
    "mailgun_domain": "mg.example.com",
    "mailgun_region": "us",
    "mailgun_from_email": "malamar@mg.example.com",
    "mailgun_to_email": "me@example.com",
    "notify_on_error": "on",
    "webhook_urls": "",
    "stall_warning_minutes": "15",
}
SAME_RULES = [
    # (page url, page form changes, the page's error element, API body)
    (
        "/settings/notifications/",
        {"mailgun_from_email": "not-an-email"},
        "id_mailgun_from_email_error",
        {"mailgun_from_email": "not-an-email"},
    ),
    (
        "/settings/notifications/",
        {"mailgun_to_email": "me@"},
        "id_mailgun_to_email_error",
        {"mailgun_to_email": "me@"},
    ),
    (
        "/settings/notifications/",
        {"webhook_urls": "https://"},
        "id_webhook_urls_error",
        {"webhook_urls": ["https://"]},
    ),
    (
        "/settings/notifications/",
        {"stall_warning_minutes": "0"},
        "id_stall_warning_minutes_error",
        {"stall_warning_minutes": 0},
    ),
    (
        "/settings/clis/claude/",
        {"claude-binary_path": "/nonexistent/claude"},
        "id_claude-binary_path_error",
        {"cli_settings": {"claude": {"binary_path": "/nonexistent/claude"}}},
    ),
    (
        "/settings/clis/claude/",
        {"claude-env_name": ["BAD NAME"], "claude-env_value": ["x"]},
        "claude-env-error",
        {"cli_settings": {"claude": {"env": {"BAD NAME": "x"}}}},
    ),
]


@pytest.mark.parametrize(("url", "form", "error_id", "body"), SAME_RULES)
def test_settings_api_refuses_what_the_page_refuses(api, url, form, error_id, body):
    from django.test import Client

    from core.settings_store import settings_get
    from tests.pages import element_text

    before = settings_get()
    data = {**NOTIFY_FORM, **form} if "notifications" in url else {"claude-binary_path": "", **form}
    page = Client().post(url, data, HTTP_HX_REQUEST="true").content.decode()
    shown = element_text(page, error_id)
    assert shown, f"no error shown at #{error_id}"
    response = api.put("/api/settings", body)
    assert response.status_code == 400
    field, _, message = error_of(response)["message"].partition(": ")
    assert message == shown  # the same rule, the same words
    assert field.split(".")[-1] in error_id.replace("-", "_") or field.endswith("env")
    assert settings_get() == before  # nothing stored by either


def test_settings_api_rejects_non_finite_minutes(api):
    response = api.client.put(
        "/api/settings", '{"stall_warning_minutes": Infinity}', content_type="application/json"
    )
    # JSON has no Infinity: the body parser refuses it before the settings see it.
    assert response.status_code == 400
    assert "Infinity is not a number in JSON" in error_of(response)["message"]


def test_saving_cli_settings_through_the_api_rechecks_that_cli(api):
    from runner.models import CliHealth

    response = api.put("/api/settings", {"cli_settings": {"codex": {"env": {"A": "1"}}}})
    assert response.status_code == 200
    pending = CliHealth.objects.filter(refresh_requested_at__isnull=False)
    assert list(pending.values_list("cli_type", flat=True)) == ["codex"]
    assert api.put("/api/settings", {"mailgun_domain": "mg.example.com"}).status_code == 200
    assert pending.count() == 1  # other settings leave the CLIs alone


def test_testing_one_cli(api):
    response = api.post("/api/health/cli/gemini/check")
    assert response.status_code == 202
    assert response.json()["cli_type"] == "gemini" and response.json()["refresh_requested_at"]
    clis = {c["cli_type"]: c for c in api.get("/api/health/cli").json()["clis"]}
    assert [cli for cli, c in clis.items() if c["refresh_requested_at"]] == ["gemini"]
    assert api.post("/api/health/cli/vim/check").status_code == 400


# --- workspaces: the API refuses what the page refuses -------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"stall_kill_minutes": NaN}', "NaN is not a number in JSON"),
        ('{"stall_kill_minutes": Infinity}', "Infinity is not a number in JSON"),
        ('{"stall_kill_minutes": 1e300}', "stall_kill_minutes must be"),
        ('{"retention_days": 100000000000000000000}', "is too large"),
        ('{"retention_days": 40000}', "retention_days must be"),
        ('{"notify_on_error": true}', "notify_on_error"),
        ('{"notify_on_in_review": "maybe"}', "notify_on_in_review"),
        ('{"mcp_tools_enabled": "yes please"}', "mcp_tools_enabled"),
    ],
)
def test_workspace_api_refuses_bad_numbers_and_switches(api, workspace, raw, message):
    response = api.client.put(
        f"/api/workspaces/{workspace.id}", raw, content_type="application/json"
    )
    assert response.status_code == 400
    assert message in error_of(response)["message"]
    assert api.get(f"/api/workspaces/{workspace.id}").json()["stall_kill_minutes"] == 0


def test_giving_agents_malamars_tools_is_a_workspace_setting_off_by_default(api, workspace):
    url = f"/api/workspaces/{workspace.id}"
    assert api.get(url).json()["mcp_tools_enabled"] is False
    assert api.put(url, {"mcp_tools_enabled": True}).json()["mcp_tools_enabled"] is True
    assert api.get(url).json()["mcp_tools_enabled"] is True
    created = api.post("/api/workspaces", {"title": "Tools", "mcp_tools_enabled": True})
    assert created.status_code == 201 and created.json()["mcp_tools_enabled"] is True


def test_workspace_notifications_inherit_on_off(api, workspace):
    from core.settings_store import settings_update

    url = f"/api/workspaces/{workspace.id}"
    ws = api.get(url).json()
    assert (ws["notify_on_error"], ws["notify_on_error_effective"]) == ("inherit", True)
    settings_update(changes={"notify_on_error": False})
    ws = api.get(url).json()
    assert (ws["notify_on_error"], ws["notify_on_error_effective"]) == ("inherit", False)
    ws = api.put(url, {"notify_on_error": "on", "notify_on_in_review": "off"}).json()
    assert (ws["notify_on_error"], ws["notify_on_error_effective"]) == ("on", True)
    assert (ws["notify_on_in_review"], ws["notify_on_in_review_effective"]) == ("off", False)
    ws = api.put(url, {"notify_on_error": "inherit"}).json()
    assert ws["notify_on_error_effective"] is False
    schema = api.get("/api/openapi.json").json()["components"]["schemas"]["WorkspaceUpdate"]
    notify = schema["properties"]["notify_on_error"]["anyOf"][0]
    assert notify["enum"] == ["inherit", "on", "off"] and "inherit" in notify["description"]
