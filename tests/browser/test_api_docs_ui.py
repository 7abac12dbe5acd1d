"""/api/docs in a real browser, under the app's own Content-Security-Policy: Swagger UI from
local files only, its operations rendered, no CSP violation, no request to another host."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page

pytestmark = pytest.mark.browser

RECORD_CSP_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__csp.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def test_api_docs_render_the_operations_with_the_apps_csp(browser, server):
    page = new_page(browser)
    page.add_init_script(RECORD_CSP_VIOLATIONS)
    elsewhere = []
    page.on("request", lambda r: r.url.startswith(server.url) or elsewhere.append(r.url))
    response = page.goto(f"{server.url}/api/docs")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    operations = page.locator(".opblock")
    expect(operations.first).to_be_visible()
    expect(page.locator(".opblock-summary-path", has_text="/api/workspaces").first).to_be_visible()
    assert operations.count() >= 20
    page.locator(".opblock-summary", has_text="/api/health").first.click()  # opens, renders
    expect(page.get_by_role("button", name="Try it out").first).to_be_visible()
    assert page.evaluate("window.__csp") == []
    assert elsewhere == []
    page.console_errors.check()
    page.close()
