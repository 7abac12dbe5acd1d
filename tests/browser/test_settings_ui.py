"""Global settings in a real browser: CLI binary path, environment variables, refresh."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_cli_settings_mask_secrets_and_refresh_shows_checking(page, server):
    page.goto(f"{server.url}/settings/")
    card = page.locator("#cli-claude")
    expect(card).to_contain_text("Not checked yet")
    card.get_by_label("Binary path").fill("/opt/claude/bin/claude")
    card.get_by_role("button", name="Add variable").click()
    card.get_by_label("Variable name").last.fill("ANTHROPIC_API_KEY")
    card.get_by_label("Value").last.fill("sk-ant-very-secret-9876")
    card.get_by_role("button", name="Save Claude Code").click()
    expect(page.locator(".toast")).to_contain_text("Claude Code settings saved")

    page.reload()
    card = page.locator("#cli-claude")
    expect(card.get_by_label("Binary path")).to_have_value("/opt/claude/bin/claude")
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
    card.get_by_label("Variable name").last.fill("NOT VALID")
    card.get_by_role("button", name="Save Claude Code").click()
    expect(card.locator("#claude-env-error")).to_contain_text("is not a valid name")
    card.get_by_role("button", name="Remove NOT VALID").click()

    # Remove the stored variable.
    card.get_by_role("button", name="Remove ANTHROPIC_API_KEY").click()
    card.get_by_role("button", name="Save Claude Code").click()
    expect(page.locator(".toast").last).to_contain_text("saved")
    assert server.api("GET", "/settings")["cli_settings"]["claude"]["env"] == {}

    page.get_by_role("button", name="Refresh CLI Status").click()
    expect(page.locator(".cli-status .badge", has_text="Checking…")).to_have_count(4)
