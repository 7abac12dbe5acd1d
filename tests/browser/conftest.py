"""Browser tests: Playwright (pip) driving Debian's Chromium against a live Malamar server.

Without /usr/bin/chromium they skip with a printed reason, unless MALAMAR_REQUIRE_BROWSER=1
(set by .ci/run after installing it), where a missing browser is a failure.

A test module shares one server (a start costs seconds of CPU): `server` and `stack` wipe its
database before each test (tests.databases.wipe), so a test sees only what it makes and the
tests of a module pass in any order; `stack` starts a worker of the test's own and stops it
after the test.

A module's tests also reuse its browser contexts (ContextPool): `new_page` gives a page a
context no open page uses, cleared as new, and a test's pages close as it ends (close them with
`page.close()`, never the context). The browser modules a test process runs one after the
other share one Chromium (SharedChromium).
"""

import os
import re
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from tests.databases import Template, release, wipe
from tests.live import Server
from tests.stack import Stack, data_dir_from

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
# How long a navigation, an action or an assertion may take: only a broken page waits this long
# (passing assertions return as soon as they hold). A page load takes 0.1-0.5 s on an idle
# 2-core machine; 10 s was exceeded once in CI, while the machine stalled (a test whose setup
# takes 0.5 s took 5 s before the page was even asked for).
TIMEOUT_MS = 30_000
PHONE = {"width": 375, "height": 812}


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} not found: install it with `apt-get install chromium`"
    if os.environ.get("MALAMAR_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MALAMAR_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    print(f"\nSkipping browser tests: {reason}")
    pytest.skip(reason)


class SharedChromium:
    """One Chromium (and Playwright driver) for the browser modules a test process runs one
    after the other: each start cost ~2 CPU-s. Stopped before any other test runs: Playwright's
    sync API keeps an event loop around, which Django's database tests must not see."""

    def __init__(self) -> None:
        self.playwright = None
        self.chromium = None

    def get(self):
        if self.chromium is None:
            require_chromium()
            from playwright.sync_api import expect, sync_playwright

            expect.set_options(timeout=TIMEOUT_MS)
            self.playwright = sync_playwright().start()
            self.chromium = self.playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
            )
        return self.chromium

    def stop(self) -> None:
        if self.chromium is not None:
            self.chromium.close()
            self.playwright.stop()
            self.chromium = self.playwright = None


SHARED_CHROMIUM = SharedChromium()
BROWSER_TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a module's last test (its fixtures gone), Chromium stops unless the next test is
    a browser test too (tests/conftest.py runs the browser modules first)."""
    if nextitem is None or BROWSER_TESTS not in nextitem.path.parents:
        SHARED_CHROMIUM.stop()


@pytest.fixture(scope="module")
def browser(migrated_db):
    # The test database (the servers' template) is made first, outside Playwright's loop.
    chromium = SHARED_CHROMIUM.get()
    chromium.idle_contexts = ContextPool()
    yield chromium
    chromium.idle_contexts.close()


@pytest.fixture(scope="session")
def migrated_db(template_db) -> Template:
    """The session's migrated database (no sample workspace), copied into each test's data dir
    (migrating takes seconds)."""
    return template_db


class LiveServer(Server):
    """A server plus JSON API helpers to set up data quickly."""

    def api(self, method: str, path: str, body=None) -> dict:
        response = requests.request(
            method, f"{self.url}/api{path}", json=body, timeout=TIMEOUT_MS / 1000
        )
        assert response.status_code < 400, response.text
        return response.json() if response.content else {}

    def workspace(self, title: str, **fields) -> dict:
        return self.api("POST", "/workspaces", {"title": title, **fields})

    def agent(self, workspace_id: str, name: str, cli_type: str = "claude") -> dict:
        body = {"name": name, "instruction": f"You are the {name}.", "cli_type": cli_type}
        return self.api("POST", f"/workspaces/{workspace_id}/agents", body)


@pytest.fixture(scope="module")
def module_server(browser, tmp_path_factory, migrated_db):
    data_dir = data_dir_from(migrated_db, tmp_path_factory.mktemp("server") / "data")
    running = LiveServer(data_dir).start()
    yield running
    running.stop()
    release(data_dir)


@pytest.fixture
def server(module_server):
    """The module's server on a database as new (wiped)."""
    wipe(module_server.data_dir)
    return module_server


class ConsoleErrors(list):
    csp_violations = None  # set by new_page: checked along with the console

    def check(self) -> None:
        assert not self, "errors in the browser console:\n" + "\n".join(self)
        if self.csp_violations is not None:
            self.csp_violations.check()


class CspViolations(list):
    def check(self) -> None:
        assert not self, "Content-Security-Policy violations:\n" + "\n".join(self)


# Reports every violation of the page's Content-Security-Policy, including those the browser
# does not log (a blocked style attribute set by a script, for example).
CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (event) => {
  const where = event.sourceFile ? ` at ${event.sourceFile}:${event.lineNumber}` : "";
  const what = event.blockedURI || "inline";
  window.malamarCspViolation(`${event.effectiveDirective} blocked ${what}${where} ${event.sample}`);
}, true);
"""

# What a failed browser test reports of its open pages (pytest_runtest_makereport): each
# dialog's state and the page's last htmx events and dialog calls, so that a failure seen once
# (a flake under load) tells its sequence.
PAGE_TRACE = """
(() => {
  const trace = (window.malamarTrace = []);
  const name = (el) => {
    if (!el || !el.tagName) return String(el);
    const what = el.id ? "#" + el.id : el.tagName.toLowerCase();
    return el.isConnected ? what : what + " (detached)";
  };
  const note = (...what) => {
    trace.push([Math.round(performance.now()), ...what].join(" "));
    if (trace.length > 80) trace.shift();
  };
  const types = ["htmx:beforeRequest", "htmx:afterRequest", "htmx:beforeSwap", "htmx:afterSwap",
    "htmx:responseError", "htmx:sendError", "malamar:dialog-close", "malamar:gone", "close",
    "cancel"];
  types.forEach((type) => document.addEventListener(type, (event) => {
    const config = (event.detail && event.detail.requestConfig) || {};
    note(type, name(event.target), config.verb || "", config.path || "");
  }, true));
  ["showModal", "show", "close"].forEach((method) => {
    const original = HTMLDialogElement.prototype[method];
    HTMLDialogElement.prototype[method] = function (...args) {
      note("dialog." + method, name(this), this.open ? "(open)" : "(closed)");
      return original.apply(this, args);
    };
  });
})();
"""
PAGE_STATE = """() => ({
  url: location.href,
  focus: document.activeElement && (document.activeElement.id || document.activeElement.tagName),
  dialogs: [...document.querySelectorAll("dialog")].map((d) =>
    `${d.id}: ${d.open ? (d.matches(":modal") ? "open, modal" : "open") : "closed"}; holds ` +
    JSON.stringify(d.textContent.replace(/\\s+/g, " ").trim().slice(0, 100))),
  trace: window.malamarTrace || [],
})"""


def pages_report(browser) -> str:
    """Each open test page: its URL, focus, dialogs and trace (PAGE_TRACE); "" when none."""
    lines = []
    for pool in browser.idle_contexts.contexts.values():
        for context in pool:
            for page in open_test_pages(context):
                try:
                    state = page.evaluate(PAGE_STATE)
                except Exception as exc:  # (a closed or crashed page: say so, go on)
                    lines.append(f"{page.url}: could not be read ({exc})")
                    continue
                lines += [f"{state['url']} (focus: {state['focus']})", *state["dialogs"]]
                lines += ["  " + entry for entry in state["trace"]]
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    browser = item.funcargs.get("browser") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and browser is not None:
        text = pages_report(browser)
        if text:
            report.sections.append(("browser pages at the failure", text))


def watch_csp(page) -> CspViolations:
    """Collect the page's CSP violations (console messages and securitypolicyviolation
    events, its popups' too) in `page.csp_violations`; call before the first navigation."""
    violations = CspViolations()
    page.context.owner = page  # (the context's listener reports to it: see ContextPool)
    page.on(
        "console",
        lambda message: (
            "Content Security Policy" in message.text
            and violations.append(f"{page.url}: {message.text}")
        ),
    )
    page.csp_violations = violations
    return violations


class ContextPool:
    """The browser contexts of a module, reused: a page in a context of its own cost the browser
    ~1.5 CPU-s, one in a context kept with a page open ~0.7 (measured: ten pages, each loading
    the board, 15 CPU-s against 7; the renderer process for the next page is then ready), and a
    module makes one or more per test. A page never shares its context with another page of a
    test: `take` gives a context whose test pages have all closed, or a new one. A context
    given again is as new to the page: its cookies, permissions, HTTP cache and the storage of
    every origin it visited (local storage, IndexedDB, caches...) are cleared first."""

    def __init__(self) -> None:
        self.contexts: dict[tuple, list] = {}

    def take(self, browser, options: dict):
        key = tuple(sorted((name, repr(value)) for name, value in options.items()))
        pool = self.contexts.setdefault(key, [])
        for context in pool:
            if not open_test_pages(context):
                self._clear(context)
                return context
        context = browser.new_context(**options)
        context.set_default_timeout(TIMEOUT_MS)
        context.origins = set()
        context.owner = None
        context.on("page", lambda page: page.on("framenavigated", _note_origin))
        context.on("close", lambda _: pool.remove(context))
        context.expose_binding("malamarCspViolation", _report_csp_violation)
        context.add_init_script(CSP_LISTENER)
        context.add_init_script(PAGE_TRACE)
        context.keeper = context.new_page()  # blank, open as long as the context
        context.cdp = context.new_cdp_session(context.keeper)
        pool.append(context)
        return context

    @staticmethod
    def _clear(context) -> None:
        context.clear_cookies()
        context.clear_permissions()
        for origin in context.origins:
            context.cdp.send(
                "Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"}
            )
        context.cdp.send("Network.clearBrowserCache")
        context.origins.clear()
        context.owner = None

    def close(self) -> None:
        for pool in self.contexts.values():
            for context in list(pool):
                context.close()

    def close_test_pages(self) -> None:
        for pool in self.contexts.values():
            for context in pool:
                for page in open_test_pages(context):
                    page.close()


def open_test_pages(context) -> list:
    """The pages of a pooled context but its keeper."""
    return [page for page in context.pages if page is not context.keeper]


def _note_origin(frame) -> None:
    match = re.match(r"https?://[^/]+", frame.url)
    if match:
        frame.page.context.origins.add(match.group())


def _report_csp_violation(source, text: str) -> None:
    owner = source["context"].owner
    if owner is not None:
        owner.csp_violations.append(f"{source['page'].url}: {text}")


def new_page(browser, *, viewport=None, **context_options):
    """A page in a context of its own (see ContextPool) that records console errors and
    uncaught exceptions (in `page.console_errors`) and CSP violations (in
    `page.csp_violations`): a test ends with `page.console_errors.check()`, which checks both,
    and closes the page."""
    context = browser.idle_contexts.take(
        browser, {"viewport": viewport or DESKTOP, **context_options}
    )
    page = context.new_page()
    errors = ConsoleErrors()
    page.on(
        "console",
        lambda message: message.type == "error" and errors.append(f"{page.url}: {message.text}"),
    )
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    page.console_errors = errors
    errors.csp_violations = watch_csp(page)
    return page


@pytest.fixture(autouse=True)
def pages_closed_after_the_test(request):
    """A test's pages close as it ends (left open, they kept their live connections to the
    module's server, and their contexts, until the module's end)."""
    yield
    browser = request.node.funcargs.get("browser")
    if browser is not None:
        browser.idle_contexts.close_test_pages()


@pytest.fixture
def page(browser, server):
    page = new_page(browser, color_scheme="light")
    yield page
    errors = page.console_errors
    page.close()
    errors.check()  # and the CSP violations


@pytest.fixture(scope="module")
def module_stack(browser, tmp_path_factory, migrated_db):
    """The module's server of `stack`, and its temp dir (the server keeps chat uploads there,
    the worker's runs read them)."""
    running = Stack(tmp_path_factory.mktemp("stack"), migrated_db).start(worker=False)
    yield running
    running.stop()


@pytest.fixture
def stack(module_stack, tmp_path):
    """Server + worker with the fake CLIs first on PATH (tests.stack.Stack); `.server.url`: the
    module's server on a database as new (wiped), a worker of this test's own, the fake CLIs'
    log (`fake_runs`) in this test's tmp_path."""
    wipe(module_stack.data_dir)
    module_stack.fake_log = tmp_path / "fake.jsonl"
    module_stack.env["MALAMAR_FAKE_LOG"] = str(module_stack.fake_log)
    module_stack.start_worker()
    yield module_stack
    module_stack.stop_worker()


def release_the_cli(stack, task_id: str) -> None:
    """Let the fake CLI's current `hold` on that task end (tests/fakes/README.md): a state a
    test must see lasts until it has seen it, however slow the machine."""
    (stack.temp_dir / f"malamar_task_{task_id}" / "release").touch()


NEXT_FRAME = "() => new Promise((done) => requestAnimationFrame(() => setTimeout(done)))"


def drag(page, source, target, *, x: float | None = None, target_y: float | None = None) -> None:
    """Drag `source` onto `target` as a hand does: press, then several moves (at `x` px from
    their left, default their middle; `target_y` px below the target's top, default its middle).
    Playwright's own `drag_to` takes a drag as started only if the browser's dragstart comes
    before a zero-delay timer after the first mousemove it sees; under load that may be the
    hover's move dispatched late (mouse moves wait for the next frame), and then no drag
    happens at all (CI: no drop, no request). So the hover's move lands first (a frame and a
    task later), and each further move is another chance."""
    start, end = _box(source), _box(target)
    page.mouse.move(start["x"] + (x or start["width"] / 2), start["y"] + start["height"] / 2)
    page.evaluate(NEXT_FRAME)
    page.mouse.down()
    to_x = end["x"] + (x or end["width"] / 2)
    to_y = end["y"] + (end["height"] / 2 if target_y is None else target_y)
    page.mouse.move(to_x, to_y, steps=5)
    page.mouse.move(to_x, to_y)
    page.mouse.up()


def _box(locator) -> dict:
    """Where the element is (a live refresh may replace it as it is measured: measure again)."""
    expect(locator).to_be_visible()
    return locator.bounding_box() or _box(locator)
