"""Creating, finding, configuring and deleting workspaces in a real browser."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_create_a_workspace_then_search(page, server):
    page.goto(server.url)
    expect(page.get_by_text("No workspaces yet")).to_be_visible()

    page.get_by_role("button", name="Create Workspace").click()
    dialog = page.locator("#create-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#id_title")).to_be_focused()

    # The title is required: the error is shown next to the field and tied to it.
    dialog.get_by_role("button", name="Create workspace").click()
    title = page.locator("#id_title")
    expect(title).to_have_attribute("aria-invalid", "true")
    expect(title).to_have_attribute("aria-describedby", re.compile("id_title_error"))
    expect(page.locator("#id_title_error")).to_have_text("Title is required")
    expect(title).to_be_focused()

    title.fill("Alpha project")
    page.locator("#id_description").fill("Everything alpha.")
    dialog.get_by_role("button", name="Create workspace").click()
    expect(page).to_have_url(re.compile(r"/workspaces/[\w-]{21}/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Alpha project")

    page.get_by_role("link", name="Workspaces").first.click()
    page.get_by_role("button", name="New workspace").click()
    page.locator("#id_title").fill("Beta launch")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Beta launch")

    page.goto(server.url)
    cards = page.locator(".workspace-card")
    expect(cards).to_have_count(2)
    page.get_by_role("searchbox", name="Search workspaces by title").fill("alp")
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text("Alpha project")
    expect(page).to_have_url(re.compile(r"\?q=alp$"))
    page.get_by_role("searchbox").fill("zzz")
    expect(page.get_by_text("No workspaces match “zzz”")).to_be_visible()
    page.get_by_role("searchbox").fill("")
    expect(cards).to_have_count(2)


def test_edit_settings_and_delete_the_workspace(page, server, tmp_path):
    workspace = server.workspace("Gamma", description="Old instruction")
    url = f"{server.url}/workspaces/{workspace['id']}/settings/"
    page.goto(url)

    page.get_by_label("Title").fill("Gamma renamed")
    page.get_by_label("Instruction").fill("New instruction")
    path = page.get_by_label("Directory path")
    expect(path).to_be_hidden()
    page.get_by_text("Static directory").click()
    expect(path).to_be_visible()
    path.fill(str(tmp_path / "not-there-yet"))
    expect(page.get_by_text("This folder does not exist yet")).to_be_visible()
    path.fill(str(tmp_path))
    expect(page.get_by_text("This folder does not exist yet")).to_be_hidden()
    path.fill(str(tmp_path / "not-there-yet"))
    page.get_by_role("switch", name="Delete done tasks automatically").uncheck()
    tools = page.get_by_role("switch", name="Give agents Malamar's tools")
    expect(tools).not_to_be_checked()
    tools.check()
    page.get_by_label("Keep done tasks for (days)").fill("30")
    error_switch = page.get_by_label("When an error occurs")
    expect(error_switch.locator("option:checked")).to_have_text("Inherit (currently on)")
    error_switch.select_option("off")
    # A folder that does not exist is refused on save (issue 29), the error tied to the field.
    page.get_by_role("button", name="Save settings").click()
    expect(path).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#settings-form")).to_contain_text("does not exist: create it first")
    assert server.api("GET", f"/workspaces/{workspace['id']}")["title"] == "Gamma"
    page.get_by_label("Directory path").fill(str(tmp_path))
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".toast")).to_contain_text("Settings saved")
    expect(page.get_by_role("button", name="Save settings")).to_be_focused()

    page.reload()
    expect(page.get_by_label("Title")).to_have_value("Gamma renamed")
    expect(page.get_by_label("Instruction")).to_have_value("New instruction")
    expect(page.get_by_label("Static directory")).to_be_checked()
    expect(page.get_by_label("Directory path")).to_have_value(str(tmp_path))
    expect(page.get_by_role("switch", name="Delete done tasks automatically")).not_to_be_checked()
    expect(page.get_by_role("switch", name="Give agents Malamar's tools")).to_be_checked()
    expect(page.get_by_label("Keep done tasks for (days)")).to_have_value("30")
    expect(page.get_by_label("When an error occurs")).to_have_value("off")
    expect(page.get_by_label("When a task moves to In Review")).to_have_value("inherit")
    stored = server.api("GET", f"/workspaces/{workspace['id']}")
    assert stored["retention_days"] == 30 and stored["working_directory_mode"] == "static"
    assert (stored["notify_on_error"], stored["notify_on_in_review"]) == ("off", "inherit")
    assert stored["mcp_tools_enabled"] is True

    # Validation: a blank title stays in the page with the error tied to the field.
    page.get_by_label("Title").fill("")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#id_title_error")).to_have_text("Title is required")
    expect(page.get_by_label("Title")).to_have_attribute("aria-describedby", "id_title_error")

    # Delete by typing the name.
    page.get_by_role("button", name="Delete workspace").click()
    dialog = page.locator("#delete-dialog")
    confirm = dialog.get_by_role("button", name="Delete workspace")
    expect(dialog.locator("form:invalid")).to_have_count(1)
    typed = dialog.get_by_role("textbox")
    typed.fill("gamma renamed")
    typed.evaluate("el => el.addEventListener('invalid', () => (el.dataset.refused = 'yes'))")
    confirm.click()  # (the browser's own validation refuses it: no request)
    expect(typed).to_have_attribute("data-refused", "yes")
    expect(typed).to_be_focused()
    dialog.get_by_role("textbox").fill("Gamma renamed")
    expect(dialog.locator("form:invalid")).to_have_count(0)
    confirm.click()
    expect(page).to_have_url(f"{server.url}/")
    expect(page.locator(".toast")).to_contain_text("Deleted “Gamma renamed”")
    expect(page.get_by_text("No workspaces yet")).to_be_visible()


def test_first_run_checklist_and_cli_notices_follow_health_checks_live(page, server):
    from tests.live import django_script

    workspace = server.workspace("Sample-like")
    server.agent(workspace["id"], "Planner", "claude")
    page.goto(server.url)
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    checklist = page.locator("#first-run")
    cli_step = checklist.locator("[data-step=cli]")
    expect(cli_step).to_contain_text("Checking your CLIs")
    expect(cli_step).not_to_have_class(re.compile(r"\bis-done\b"))
    card = page.locator(f"[data-workspace='{workspace['id']}']")
    expect(card.locator(".workspace-card__alert")).to_have_count(0)

    # The worker's health checks come in: the page follows without a reload.
    django_script(
        server.data_dir,
        "from django.utils import timezone\n"
        "from runner.services import cli_health_store as store\n"
        "now = timezone.now()\n"
        "store(cli_type='codex', outcome={'status': 'healthy'}, started_at=now, full=False)\n"
        "store(cli_type='claude', outcome={'status': 'unhealthy', 'error': 'Binary not found'},"
        " started_at=now, full=False)\n",
    )
    expect(cli_step).to_have_class(re.compile(r"\bis-done\b"))
    expect(cli_step).to_contain_text("Working: Codex CLI.")
    expect(card.locator(".workspace-card__alert")).to_contain_text(
        "Claude Code is not working: 1 agent cannot run."
    )
    directory = checklist.locator("[data-step=directory]")
    expect(directory.get_by_role("link")).to_have_attribute(
        "href", f"/workspaces/{workspace['id']}/settings/#directory-heading"
    )

    # Dismissed for good.
    page.get_by_role("button", name="Dismiss the checklist").click()
    expect(checklist.locator(".first-run")).to_have_count(0)
    page.reload()
    expect(page.locator(".workspace-card")).to_have_count(1)
    expect(checklist.locator(".first-run")).to_have_count(0)
