"""The Agents tab in a real browser: add, validate, edit, reorder (drag and buttons), delete."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import drag
from tests.live import wait_until

pytestmark = pytest.mark.browser


def names(page):
    return page.locator(".agent-row__name").all_inner_texts()


# Resolves once the agents panel settled after its next live refresh (live.js fires "live" on
# it after an agents.changed event; the save's own answer, which may land after or before that
# event, does not count).
AGENTS_REFRESHED = """() => {
  window.agentsRefreshed = new Promise((resolve) => {
    document.body.addEventListener("htmx:afterSettle", (event) => {
      const trigger = event.detail.requestConfig && event.detail.requestConfig.triggeringEvent;
      if (event.target.id === "agents-panel" && trigger && trigger.type === "live") resolve(true);
    });
  });
}"""


def expect_order(page, expected):
    expect(page.locator(".agent-row__name")).to_have_text(expected)
    expect(page.locator(".agent-row [data-position]")).to_have_text(
        [str(n) for n in range(1, len(expected) + 1)]
    )


def add_agent(page, name, instruction, cli=None):
    page.locator("#add-agent").click()
    dialog = page.locator("#agent-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Name")).to_be_focused()
    dialog.get_by_label("Name").fill(name)
    dialog.get_by_label("Instruction").fill(instruction)
    if cli:
        dialog.get_by_label(cli).check()
    dialog.get_by_role("button", name="Add agent").click()


def test_add_edit_reorder_and_delete_agents(page, server):
    workspace = server.workspace("Team")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    expect(page.get_by_text("This workspace has no agents")).to_be_visible()
    expect(page.get_by_role("link", name="Chat with Malamar").first).to_be_visible()

    # The first healthy CLI (none checked yet counts as available) is preselected.
    page.locator("#add-agent").click()
    expect(page.locator("#agent-dialog").get_by_label("Claude Code")).to_be_checked()
    page.keyboard.press("Escape")
    expect(page.locator("#agent-dialog")).to_be_hidden()
    expect(page.locator("#add-agent")).to_be_focused()  # focus returns to the opener

    add_agent(page, "Planner", "Plan the work.")
    expect(page.locator("#agent-dialog")).to_be_hidden()
    expect(page.locator(".toast").last).to_contain_text("Added Planner")
    expect(page.get_by_text("This workspace has no agents")).to_be_hidden()
    add_agent(page, "Implementer", "Do the work.", cli="Codex CLI")
    add_agent(page, "Reviewer", "Review the work.")
    expect_order(page, ["Planner", "Implementer", "Reviewer"])

    # A duplicate name is an inline error tied to the field; the dialog stays open.
    add_agent(page, "planner", "Again.")
    dialog = page.locator("#agent-dialog")
    expect(dialog.locator("#id_name_error")).to_contain_text("already exists")
    expect(dialog.get_by_label("Name")).to_have_attribute("aria-invalid", "true")
    expect(dialog.get_by_label("Name")).to_be_focused()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()

    # Edit.
    page.get_by_role("button", name="Edit Implementer").click()
    expect(dialog.get_by_label("Name")).to_have_value("Implementer")
    expect(dialog.get_by_label("Codex CLI")).to_be_checked()
    dialog.get_by_label("Name").fill("Builder")
    dialog.get_by_label("Gemini CLI").check()
    # The save announces agents.changed, which re-renders the list a moment later: a drag
    # started while that swap lands is lost. Wait for it (a positive signal, no sleep).
    page.evaluate(AGENTS_REFRESHED)
    dialog.get_by_role("button", name="Save changes").click()
    expect(dialog).to_be_hidden()
    expect_order(page, ["Planner", "Builder", "Reviewer"])
    page.evaluate("() => window.agentsRefreshed")
    expect(page.locator(".agent-row", has_text="Builder")).to_contain_text("Gemini CLI")
    expect(page.get_by_role("button", name="Edit Builder")).to_be_focused()

    # Drag Reviewer above Planner (desktop), saved at once.
    reviewer = page.locator(".agent-row", has_text="Reviewer")
    planner = page.locator(".agent-row", has_text="Planner")
    # The list reorders at once; the save is a request in flight: wait for its answer before
    # reloading, or the reload can cancel it.
    with page.expect_response(lambda r: r.url.endswith("/agents/reorder/")) as saved:
        drag(page, reviewer, planner, x=200, target_y=4)
    assert saved.value.ok
    expect_order(page, ["Reviewer", "Planner", "Builder"])
    page.reload()
    expect_order(page, ["Reviewer", "Planner", "Builder"])

    # Up/down buttons.
    page.locator(".agent-row", has_text="Builder").hover()
    page.get_by_role("button", name="Move Builder up").click()
    expect_order(page, ["Reviewer", "Builder", "Planner"])
    expect(page.get_by_role("button", name="Move Builder up")).to_be_focused()
    page.keyboard.press("Enter")  # keyboard: the focused button moves it again
    expect_order(page, ["Builder", "Reviewer", "Planner"])
    page.get_by_role("button", name="Move Reviewer down").click()
    expect_order(page, ["Builder", "Planner", "Reviewer"])
    agents = server.api("GET", f"/workspaces/{workspace['id']}/agents")["agents"]
    assert [a["name"] for a in agents] == ["Builder", "Planner", "Reviewer"]

    # Delete with a simple confirmation; cancelling keeps the agent.
    page.get_by_role("button", name="Delete Builder").click()
    confirm = page.locator("#confirm-dialog")
    expect(confirm).to_contain_text("Delete Builder?")
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_be_hidden()
    expect_order(page, ["Builder", "Planner", "Reviewer"])
    page.get_by_role("button", name="Delete Builder").click()
    confirm.get_by_role("button", name="Delete").click()
    expect_order(page, ["Planner", "Reviewer"])
    expect(page.locator(".toast").last).to_contain_text("Deleted Builder")


def test_agent_changes_from_elsewhere_appear_live(page, server):
    workspace = server.workspace("Live")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    expect(page.get_by_text("No agents yet")).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    server.agent(workspace["id"], "Remote")  # e.g. another tab, or the Malamar agent
    expect_order(page, ["Remote"])
    expect(page.get_by_text("This workspace has no agents")).to_be_hidden()
    other = server.workspace("Other")
    server.agent(other["id"], "Elsewhere")
    # Events arrive in order: once this workspace's next change shows, the other workspace's
    # change has had its turn (and must not have shown).
    server.agent(workspace["id"], "Later")
    expect_order(page, ["Remote", "Later"])
    assert names(page) == ["Remote", "Later"]


def test_the_agent_dialog_follows_the_chosen_cli(page, server):
    workspace = server.workspace("Models")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    page.locator("#add-agent").click()
    dialog = page.locator("#agent-dialog")
    dialog.get_by_label("Name").fill("Coder")
    dialog.get_by_label("Instruction").fill("Code.")
    dialog.get_by_label("Codex CLI").check()
    model = dialog.get_by_label("Model")
    expect(model).to_have_attribute("list", "agent-models")
    expect(dialog.locator("datalist#agent-models")).to_have_attribute("data-cli", "codex")
    effort = dialog.get_by_label("Reasoning effort")
    expect(effort).to_be_visible()
    expect(effort.locator("option")).to_have_text(
        ["CLI default", "minimal", "low", "medium", "high"]
    )
    dialog.get_by_label("Gemini CLI").check()
    expect(dialog.get_by_text("Gemini CLI has no reasoning effort setting")).to_be_visible()
    expect(dialog.get_by_label("Argument template")).to_be_hidden()
    # What is typed while the pick's answer is on its way stays (the answer held back).
    held = []
    page.route("**/agents/cli-settings/**", lambda route: held.append(route))
    dialog.get_by_label("Claude Code").check()
    model.fill("sonnet")
    wait_until(lambda: page.evaluate("true") and held, timeout=30, what="the pick's request")
    held[0].continue_()
    page.unroute("**/agents/cli-settings/**")
    expect(dialog.locator("datalist#agent-models")).to_have_attribute("data-cli", "claude")
    expect(model).to_have_value("sonnet")
    dialog.get_by_label("Reasoning effort").select_option("high")
    dialog.get_by_label("Extra arguments").fill("--verbose\n--output-format=json")
    dialog.get_by_role("button", name="Add agent").click()
    expect(dialog.locator(".field__error")).to_contain_text(
        "Extra argument '--output-format=json' is not allowed for Claude Code"
    )
    dialog.get_by_label("Extra arguments").fill("--verbose")
    dialog.get_by_role("button", name="Add agent").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(".agent-row", has_text="Coder")).to_contain_text(
        "Claude Code · sonnet · high"
    )

    page.locator("#add-agent").click()
    dialog.get_by_label("Name").fill("Scripted")
    dialog.get_by_label("Instruction").fill("Script.")
    dialog.get_by_label("Custom command").check()
    expect(dialog.get_by_text("Custom command has no reasoning effort setting")).to_be_visible()
    dialog.get_by_label("Binary").fill("qwen")
    dialog.get_by_label("Argument template").fill("{prompt} --yolo --out {output}")
    dialog.get_by_role("button", name="Add agent").click()
    expect(dialog.locator(".field__error")).to_contain_text("unknown placeholder {output}")
    dialog.get_by_label("Argument template").fill("{prompt} --yolo --model={model}")
    dialog.get_by_role("button", name="Add agent").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(".agent-row", has_text="Scripted")).to_contain_text("Custom command")
    agents = server.api("GET", f"/workspaces/{workspace['id']}/agents")["agents"]
    assert [(a["cli_type"], a["model"], a["custom_args"]) for a in agents] == [
        ("claude", "sonnet", ""),
        ("custom", "", "{prompt} --yolo --model={model}"),
    ]
