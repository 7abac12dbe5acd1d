"""Too-large form posts in a real browser: the server's own error toast, nothing else."""

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import LiveServer, new_page
from tests.databases import release
from tests.stack import data_dir_from

pytestmark = pytest.mark.browser


@pytest.fixture
def small_server(browser, tmp_path, migrated_db):
    data_dir = data_dir_from(migrated_db, tmp_path / "data")
    running = LiveServer(data_dir, MALAMAR_MAX_JSON_BYTES="2048").start()
    yield running
    running.stop()
    release(data_dir)


def test_a_form_post_over_the_limit_shows_one_clear_toast(browser, small_server):
    # Not the `page` fixture: the refused request is logged in the console on purpose.
    page = new_page(browser)
    page.goto(small_server.url)
    page.get_by_role("button", name="Create Workspace").click()
    title = page.locator("#id_title")
    expect(title).to_have_attribute("maxlength", "200")
    title.fill("Big one")
    page.locator("#id_description").fill("x" * 3_000)
    page.locator("#create-dialog").get_by_role("button", name="Create workspace").click()

    toast = page.locator(".toast")
    expect(toast).to_have_count(1)
    expect(toast).to_have_class("toast toast--error")
    expect(toast).to_contain_text("at most 2 KB per request (MALAMAR_MAX_JSON_BYTES)")
    # nothing was swapped: the dialog still holds what was typed
    expect(page.locator("#create-dialog")).to_be_visible()
    expect(title).to_have_value("Big one")
    workspaces = requests.get(f"{small_server.url}/api/workspaces", timeout=5).json()
    assert workspaces["workspaces"] == []
    page.context.close()
