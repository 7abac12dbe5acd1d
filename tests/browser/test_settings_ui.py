"""Global settings in a real browser: CLI binary path, environment variables, refresh."""

import json
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from tests import databases
from tests.browser.conftest import DESKTOP, PHONE, new_page
from tests.live import wait_until
from tests.stack import FAKES_BIN

pytestmark = pytest.mark.browser
FAKE_CLAUDE = str(FAKES_BIN / "claude")


def test_cli_settings_mask_secrets_and_refresh_shows_checking(page, server):
    page.goto(f"{server.url}/settings/")
    card = page.locator("#cli-claude")
    expect(card).to_contain_text("Not checked yet")
    card.get_by_label("Binary path").fill(FAKE_CLAUDE)
    card.get_by_role("button", name="Add variable").click()
    expect(card.get_by_label("Variable name").last).to_be_focused()  # (the server's row)
    card.get_by_label("Variable name").last.fill("ANTHROPIC_API_KEY")
    card.get_by_label("Value").last.fill("sk-ant-very-secret-9876")
    card.get_by_role("button", name="Save Claude Code").click()
    expect(page.locator(".toast")).to_contain_text("Claude Code settings saved")

    page.reload()
    card = page.locator("#cli-claude")
    expect(card.get_by_label("Binary path")).to_have_value(FAKE_CLAUDE)
    value = card.get_by_label("Value of ANTHROPIC_API_KEY")
    expect(value).to_have_value("••••9876")  # masked after saving
    assert "very-secret" not in page.content()
    stored = server.api("GET", "/settings")["cli_settings"]["claude"]
    assert stored["env"] == {"ANTHROPIC_API_KEY": "••••9876"}

    # Saving again without touching the value keeps the secret.
    card.get_by_role("button", name="Save Claude Code").click()
    expect(page.locator(".toast").last).to_contain_text("Claude Code settings saved")
    assert server.api("GET", "/settings")["cli_settings"]["claude"]["env"] == {
        "ANTHROPIC_API_KEY": "••••9876"
    }

    # An invalid name is an error on the variables, tied with aria-describedby.
    card.get_by_role("button", name="Add variable").click()
    expect(card.get_by_label("Variable name")).to_have_count(2)
    expect(card.get_by_label("Variable name").last).to_be_focused()
    card.get_by_label("Variable name").last.fill("NOT VALID")
    card.get_by_role("button", name="Save Claude Code").click()
    expect(card.locator("#claude-env-error")).to_contain_text("is not a valid name")
    card.get_by_role("button", name="Remove NOT VALID").click()
    expect(card.get_by_role("button", name="Add variable")).to_be_focused()

    # Remove the stored variable.
    card.get_by_role("button", name="Remove ANTHROPIC_API_KEY").click()
    card.get_by_role("button", name="Save Claude Code").click()
    # (The toast of the previous save may still be on screen: wait for the stored result.)
    wait_until(
        lambda: server.api("GET", "/settings")["cli_settings"]["claude"]["env"] == {},
        timeout=30,
        what="the variable removed",
    )

    page.get_by_role("button", name="Refresh CLI Status").click()
    expect(page.locator(".cli-status .badge", has_text="Checking…")).to_have_count(4)


def test_a_wrong_binary_path_is_refused_on_the_field(page, server, tmp_path):
    plain = tmp_path / "claude"
    plain.write_text("#!/bin/sh\n")
    page.goto(f"{server.url}/settings/")
    card = page.locator("#cli-claude")
    field = card.get_by_label("Binary path")
    field.fill(str(plain))
    card.get_by_role("button", name="Save Claude Code").click()
    expect(card.locator("#id_claude-binary_path_error")).to_have_text(f"{plain} is not executable")
    expect(card.get_by_label("Binary path")).to_have_attribute("aria-invalid", "true")
    assert server.api("GET", "/settings")["cli_settings"]["claude"]["binary_path"] == ""


def test_test_button_shows_the_cli_answer_or_error_live(browser, stack, tmp_path):
    """Settings → CLIs → Test: the worker runs the real health prompt of that CLI, and the
    card shows what the CLI answered (or its error) as soon as it arrives."""
    answer = tmp_path / "answer.txt"
    answer.write_text("first answer")
    script = tmp_path / "claude"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "2.1.197 (Claude Code)"; exit 0; fi\n'
        f'text=$(cat "{answer}")\n'
        'if [ "$text" = "fail" ]; then echo "Invalid API key" >&2; exit 1; fi\n'
        'printf \'{"type":"result","is_error":false,"result":"%s"}\\n\' "$text"\n'
    )
    script.chmod(0o755)
    body = {"cli_settings": {"claude": {"binary_path": str(script)}}}
    stack.api("PUT", "/settings", body, expect=200)  # saving re-checks it
    page = new_page(browser)
    page.goto(f"{stack.server.url}/settings/")
    card = page.locator("#cli-claude")
    expect(card.locator("[data-cli-answer]")).to_have_text("first answer", timeout=20_000)

    answer.write_text("Hello from the test")
    card.get_by_role("button", name="Test Claude Code").click()
    expect(card.locator("[data-cli-answer]")).to_have_text("Hello from the test")
    expect(card.locator(".cli-card__head .badge")).to_have_text("Healthy")

    answer.write_text("fail")
    card.get_by_role("button", name="Test Claude Code").click()
    expect(card.locator("[data-cli-error]")).to_contain_text("Invalid API key")
    expect(card.locator(".cli-card__head .badge")).to_have_text("Unhealthy")
    expect(card.locator("[data-cli-answer]")).to_have_count(0)
    page.console_errors.check()


def test_the_workers_section_on_a_phone_and_a_desktop(browser, server):
    """With SQLite, one line about the one worker (DESIGN "Scale-out"); with PostgreSQL, the
    list of the workers sharing it. Both fit a phone."""
    now = datetime.now(UTC).isoformat(sep=" ")
    databases.query(
        server.data_dir,
        "INSERT INTO workers (id, hostname, pid, started_at, heartbeat_at, capacity, clis,"
        " version, taken_over_at, taken_over_by) VALUES (?, ?, ?, ?, ?, 0, ?, 't', NULL, '')",
        "w" * 21,
        "laptop",
        4242,
        now,
        now,
        json.dumps(["claude"]),
    )
    for viewport in (PHONE, DESKTOP):
        page = new_page(browser, viewport=viewport)
        page.goto(f"{server.url}/settings/")
        section = page.locator("#workers")
        expect(section.get_by_role("heading", name="Workers")).to_be_visible()
        if databases.ON_POSTGRES:
            row = section.locator(f"[data-worker='{'w' * 21}']")
            expect(row).to_contain_text("laptop")
            expect(row).to_contain_text("pid 4242")
            expect(row.locator("time")).to_have_attribute("data-prefix", "beat ")
        else:
            expect(section).to_contain_text("One worker on this machine (pid 4242), running 0")
            expect(section.locator("time")).to_have_attribute("data-prefix", "last heartbeat ")
        overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
        assert overflow <= 0, f"the page scrolls sideways at {viewport['width']} px"
        page.console_errors.check()
        page.close()
