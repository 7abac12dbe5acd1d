"""Hostile input in a real browser: too-large form posts (the server's own error toast, nothing
else), names with a regex's characters to type to confirm."""

import pytest
import requests
from playwright.sync_api import expect

from core.templatetags.malamar import exact_pattern
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
    page.close()


NAMES = ["a.b*c+d?", "(x)[y]{z}|w", r"back\slash ^$ /", "dash- & ~ # % , : ; < = > @ `", "émoji 🚀"]


def test_the_name_to_confirm_matches_itself_only_whatever_it_holds(browser):
    # The pattern attribute is a regular expression in the browser's "v" mode, where escaping a
    # character without a meaning is an error (the pattern would then be ignored: any text goes).
    page = new_page(browser)
    for name in NAMES:
        page.set_content("<input value=''><input value=''>")
        typed, other = page.locator("input").all()
        for field in (typed, other):
            field.evaluate("(el, pattern) => (el.pattern = pattern)", exact_pattern(name))
        typed.fill(f" {name} ")
        other.fill(name[:-1])
        assert typed.evaluate("el => el.validity.valid"), name
        assert not other.evaluate("el => el.validity.valid"), name
    page.console_errors.check()
