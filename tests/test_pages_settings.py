"""Global settings page: CLI health, binary path, environment variables, refresh."""

import re

import pytest
from django.utils import timezone

from core.settings_store import mask, settings_get
from runner.models import CliHealth
from tests.htmltree import parse
from tests.pages import element_text, field_error_is_tied, html, hx, triggers
from tests.stack import FAKES_BIN

FAKE = {cli: str(FAKES_BIN / cli) for cli in ("claude", "gemini", "codex", "opencode")}

pytestmark = pytest.mark.django_db


def env_post(cli: str, binary_path: str = "", rows=()) -> dict:
    return {
        f"{cli}-binary_path": binary_path,
        f"{cli}-env_name": [name for name, _ in rows],
        f"{cli}-env_value": [value for _, value in rows],
    }


def test_page_lists_every_cli_with_its_health(client):
    now = timezone.now()
    CliHealth.objects.create(
        cli_type="claude",
        status="healthy",
        version="2.0.1 (Claude Code)",
        binary_path="/usr/bin/claude",
        checked_at=now,
    )
    CliHealth.objects.create(
        cli_type="gemini", status="unhealthy", error="Binary not found in PATH", checked_at=now
    )
    page = html(client.get("/settings/"))
    order = re.findall(r'id="cli-(\w+)-name">([^<]+)<', page)
    assert order == [
        ("claude", "Claude Code"),
        ("codex", "Codex CLI"),
        ("gemini", "Gemini CLI"),
        ("opencode", "OpenCode"),
    ]
    tree = parse(page)

    def status(cli: str) -> tuple[str, dict[str, str]]:
        """A CLI card's status badge and its facts (Version, Binary, ...)."""
        card = tree.by_id(f"cli-status-{cli}")
        pairs = zip(card.find_all(tag="dt"), card.find_all(tag="dd"), strict=True)
        return card.find("badge").text, {dt.text: dd.text for dt, dd in pairs}

    badge, facts = status("claude")
    assert badge == "Healthy"
    assert (facts["Version"], facts["Binary"]) == ("2.0.1 (Claude Code)", "/usr/bin/claude")
    assert status("gemini")[0] == "Unhealthy"
    error = tree.by_id("cli-status-gemini").find(data_cli_error="")
    assert error.text == "Binary not found in PATH"
    assert status("opencode")[0] == "Not checked yet"
    assert tree.by_id("refresh-clis").text == "Refresh CLI Status"


def test_save_binary_path_and_environment(client):
    data = env_post("codex", FAKE["codex"], [("OPENAI_API_KEY", "sk-secret-value-1234")])
    response = hx(client, "post", "/settings/clis/codex/", data)
    assert triggers(response)["malamar:toast"]["message"] == "Codex CLI settings saved"
    stored = settings_get()["cli_settings"]["codex"]
    assert stored == {
        "binary_path": FAKE["codex"],
        "env": {"OPENAI_API_KEY": "sk-secret-value-1234"},
        "health_timeout_seconds": 90,  # left empty: the default
    }
    page = html(response)
    assert "sk-secret-value-1234" not in page  # masked after saving
    row = parse(page).find("env__row")
    name, value = row.find_all(tag="input")
    assert (name.attrs["value"], "readonly" in name.attrs) == ("OPENAI_API_KEY", True)
    assert value.attrs["value"] == "••••1234"
    assert "autofocus" not in name.attrs  # (only an added row takes the focus)
    assert "sk-secret" not in html(client.get("/settings/"))


def test_add_variable_brings_an_empty_row_whose_name_takes_the_focus(client):
    add = parse(html(client.get("/settings/"))).by_id("cli-form-opencode").find("env__add")
    assert (add.attrs["hx-get"], add.attrs["hx-target"]) == (
        "/settings/clis/opencode/env-row/",
        "#opencode-env-rows",
    )
    response = hx(client, "get", add.attrs["hx-get"])
    rows = parse(html(response)).find_all("env__row")
    assert len(rows) == 1
    name, value = rows[0].find_all(tag="input")
    assert (name.attrs["name"], name.attrs["value"], "autofocus" in name.attrs) == (
        "opencode-env_name",
        "",
        True,
    )
    assert (value.attrs["name"], value.attrs["aria-label"]) == ("opencode-env_value", "Value")
    assert rows[0].find(tag="button").attrs["aria-label"] == "Remove variable"
    assert client.get("/settings/clis/nothing/env-row/").status_code == 404


def test_saving_the_mask_keeps_the_secret_and_removing_a_row_deletes_it(client):
    hx(client, "post", "/settings/clis/claude/", env_post("claude", "", [("A", "first-secret")]))
    hx(
        client,
        "post",
        "/settings/clis/claude/",
        env_post("claude", "", [("A", mask("first-secret")), ("B", "second")]),
    )
    assert settings_get()["cli_settings"]["claude"]["env"] == {"A": "first-secret", "B": "second"}
    hx(client, "post", "/settings/clis/claude/", env_post("claude", "", [("B", mask("second"))]))
    assert settings_get()["cli_settings"]["claude"]["env"] == {"B": "second"}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("BAD NAME", "x")], "is not a valid name"),
        ([("", "value")], "Each variable needs a name"),
        ([("A", "1"), ("A", "2")], "is listed twice"),
    ],
)
def test_invalid_environment_is_an_error_on_the_fieldset(client, rows, message):
    response = hx(client, "post", "/settings/clis/gemini/", env_post("gemini", "", rows))
    page = parse(html(response))
    assert message in page.by_id("gemini-env-error").text
    fieldset = page.by_id("cli-form-gemini").find(tag="fieldset")
    assert fieldset.attrs["aria-describedby"] == "gemini-env-hint gemini-env-error"
    assert "malamar:toast" not in triggers(response)
    assert settings_get()["cli_settings"]["gemini"]["env"] == {}


def test_save_without_javascript_redirects(client):
    response = client.post("/settings/clis/opencode/", env_post("opencode", FAKE["opencode"]))
    assert response.status_code == 302 and response.url == "/settings/"
    assert settings_get()["cli_settings"]["opencode"]["binary_path"] == FAKE["opencode"]


def test_unknown_cli_is_a_404(client):
    assert client.post("/settings/clis/vim/", {}).status_code == 404
    assert client.get("/settings/clis/vim/status/").status_code == 404


def test_refresh_asks_the_worker_and_shows_checking(client):
    response = hx(client, "post", "/settings/clis/refresh/")
    assert response.status_code == 204
    assert triggers(response)["malamar:live"] == {"type": "cli.checking"}
    assert CliHealth.objects.filter(refresh_requested_at__isnull=False).count() == 4
    status = html(hx(client, "get", "/settings/clis/claude/status/"))
    assert "Checking…" in status and 'hx-trigger="load delay:2s"' in status  # polls
    CliHealth.objects.filter(cli_type="claude").update(  # as the worker does once it checked
        status="healthy", checked_at=timezone.now(), refresh_requested_at=None
    )
    status = html(hx(client, "get", "/settings/clis/claude/status/"))
    assert "Healthy" in status and "load delay" not in status


def test_refresh_without_javascript(client):
    response = client.post("/settings/clis/refresh/")
    assert response.status_code == 302 and response.url == "/settings/"


@pytest.mark.parametrize(
    ("kind", "needle"),
    [("missing", "does not exist"), ("folder", "is not a file"), ("plain", "is not executable")],
)
def test_binary_path_problems_are_shown_on_the_field(client, tmp_path, kind, needle):
    plain = tmp_path / "codex"
    plain.write_text("#!/bin/sh\n")
    path = {"missing": tmp_path / "nope", "folder": tmp_path, "plain": plain}[kind]
    response = hx(client, "post", "/settings/clis/codex/", env_post("codex", str(path)))
    page = html(response)
    assert element_text(page, "id_codex-binary_path_error") == f"{path} {needle}"
    assert field_error_is_tied(page, "id_codex-binary_path")
    assert "malamar:toast" not in triggers(response)
    assert settings_get()["cli_settings"]["codex"]["binary_path"] == ""
    assert not CliHealth.objects.filter(refresh_requested_at__isnull=False).exists()


def test_saving_a_cli_rechecks_it_at_once(client):
    CliHealth.objects.create(cli_type="gemini", status="healthy", checked_at=timezone.now())
    response = hx(client, "post", "/settings/clis/gemini/", env_post("gemini", FAKE["gemini"]))
    assert triggers(response)["malamar:toast"]["detail"] == "Checking it now…"
    assert triggers(response)["malamar:live"] == {"type": "cli.checking"}  # cards re-read
    requested = CliHealth.objects.filter(refresh_requested_at__isnull=False)
    assert list(requested.values_list("cli_type", flat=True)) == ["gemini"]  # only that CLI
    status = html(hx(client, "get", "/settings/clis/gemini/status/"))
    assert element_text(status, "cli-gemini-name") == "Gemini CLI"
    assert "Checking…" in status and "Healthy" not in status  # no stale healthy state


def test_test_button_asks_the_worker_and_shows_the_answer(client):
    CliHealth.objects.create(
        cli_type="claude", status="unhealthy", error="CLI exited with code 1: old error"
    )
    page = html(client.get("/settings/"))
    button = re.search(r'<button[^>]*id="test-claude"[^>]*>', page).group(0)
    assert 'hx-post="/settings/clis/claude/test/"' in button
    assert 'hx-target="#cli-status-claude"' in button and 'aria-label="Test Claude Code"' in button
    status = html(hx(client, "post", "/settings/clis/claude/test/"))
    assert "Checking…" in status and "old error" not in status
    assert 'hx-trigger="load delay:2s"' in status  # polls until the worker has answered
    requested = CliHealth.objects.filter(refresh_requested_at__isnull=False)
    assert list(requested.values_list("cli_type", flat=True)) == ["claude"]
    # The worker answers (runner.services.cli_health_store): the card shows the CLI's answer.
    CliHealth.objects.filter(cli_type="claude").update(
        status="healthy",
        error="",
        answer="OK",
        checked_at=timezone.now(),
        refresh_requested_at=None,
    )
    status = html(hx(client, "get", "/settings/clis/claude/status/"))
    assert "Healthy" in status and "load delay" not in status
    assert re.search(r"<dd[^>]*data-cli-answer[^>]*>OK</dd>", status)
    assert client.post("/settings/clis/vim/test/").status_code == 404


def test_slow_cli_is_shown_as_slow_not_unhealthy(client):
    CliHealth.objects.create(
        cli_type="codex", status="slow", error="Slow to answer: …", checked_at=timezone.now()
    )
    status = html(hx(client, "get", "/settings/clis/codex/status/"))
    assert "Slow to answer" in status and "Unhealthy" not in status
    assert "cli-status__error--slow" in status


def test_a_request_stays_checking_until_a_check_started_after_it_has_answered(client):
    from datetime import timedelta

    now = timezone.now()
    # A check that started before the request ended after it: its result is not the answer.
    CliHealth.objects.create(
        cli_type="codex",
        status="healthy",
        checked_at=now - timedelta(seconds=30),
        refresh_requested_at=now - timedelta(seconds=60),
    )
    status = html(hx(client, "get", "/settings/clis/codex/status/"))
    assert "Checking…" in status and "Healthy" not in status
    assert "Still waiting for the worker" not in status  # two tries of 30 s are normal
    CliHealth.objects.filter(cli_type="codex").update(
        refresh_requested_at=now - timedelta(minutes=4)
    )
    status = html(hx(client, "get", "/settings/clis/codex/status/"))
    assert "Still waiting for the worker" in status


def test_each_cli_has_a_health_check_time_limit_in_its_form(client):
    """A CLI slow on this machine (OpenCode needed ~63 s at load 10) gets a longer limit; one
    out of range is refused on its field."""
    data = {**env_post("opencode"), "opencode-health_timeout_seconds": "240"}
    response = hx(client, "post", "/settings/clis/opencode/", data)
    assert settings_get()["cli_settings"]["opencode"]["health_timeout_seconds"] == 240
    field = parse(html(response)).by_id("id_opencode-health_timeout_seconds")
    assert field.attrs["value"] == "240"
    data["opencode-health_timeout_seconds"] = "2"
    refused = html(hx(client, "post", "/settings/clis/opencode/", data))
    assert "greater than or equal to 5" in refused
    assert field_error_is_tied(refused, "id_opencode-health_timeout_seconds")
    assert settings_get()["cli_settings"]["opencode"]["health_timeout_seconds"] == 240
