"""Screenshots for the README, in the light and the dark theme.

Starts a real server on a temp data dir with the sample workspace (tasks, comments, an agent
run with its trace), opens it in Debian's Chromium at 1280x800, and writes
docs/workspace-{light,dark}.png (Agents tab), docs/board-{light,dark}.png (Kanban) and
docs/task-{light,dark}.png (task popup: comments, activity), docs/chat-{light,dark}.png
(chat popup), docs/changes-light.png (a task's Changes tab), docs/review-light.png (a line
comment, a draft and the verdicts), docs/review-phone{,-changes}.png (the review on a
390 px phone), docs/needs-you-phone.png (the phone's home screen while something waits) and
docs/checks-light.png (a task the workspace's checks sent back once, then passed), each kept
under 200 KB.

    .venv/bin/python bench/screenshots.py [--out docs]
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import Server, blank_database, django_script, manage  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
MAX_BYTES = 200_000

SEED = """
from django.utils import timezone
from agents.services import agent_create
from core.actors import SYSTEM, USER, agent_actor
from core.ids import new_id
from runner.models import AgentRun, TraceEvent
from chats.models import ChatMessage
from chats.services import chat_create, chat_message_add_agent, chat_message_add_system
from tasks.models import Task, TaskQueueItem
REPLY = ('Done: I added **Docs Writer** after the Approver. It reads the diff of each task '
         'and updates `README.md` when behaviour changed. Tell me if it should also keep a '
         'changelog.')
from tasks.services import comment_create
LOGIN_BEFORE = '''from django.contrib.auth import authenticate


def login(request):
    user = authenticate(request, **request.POST.dict())
    return user
'''
LOGIN_AFTER = '''from django.contrib.auth import authenticate

from app.limits import too_many_attempts


def login(request):
    if too_many_attempts(request.META["REMOTE_ADDR"]):
        return None  # the form says "try again in a minute"
    user = authenticate(request, **request.POST.dict())
    return user
'''
LIMITS = '''from django.core.cache import cache

LIMIT = 5  # attempts per minute and address


def too_many_attempts(address: str) -> bool:
    key = f"login:{address}"
    count = cache.get_or_set(key, 0, timeout=60)
    cache.incr(key)
    return count >= LIMIT
'''
PLAN = '''Plan:

1. Profile the slowest tests
2. Run them in parallel with `pytest -n 2`

| test file | time |
|---|---|
| test_worker.py | 95 s |
| test_browser.py | 70 s |
'''
DONE = '''Done. The fixture now reuses one migrated database:

```python
@pytest.fixture(scope="session")
def template_db(tmp_path_factory):
    return migrate_once(tmp_path_factory.mktemp("db"))
```
'''
TRACES = [
    ("plan", "", "[x] Read the test setup\\n[x] Reuse the database\\n[ ] Run in parallel", {}),
    ("action", "file-read", "Reading tests/conftest.py", {"path": "tests/conftest.py"}),
    ("action", "file-edit", "Editing tests/conftest.py", {"path": "tests/conftest.py"}),
    ("action", "command", "Running `pytest -q -n 2`",
     {"command": "pytest -q -n 2", "cwd": "/repo"}),
]
from agents.first_launch import SAMPLE_AGENTS, SAMPLE_DESCRIPTION, SAMPLE_TITLE
from runner.models import CliHealth
from tasks.services import task_create, task_status_set
from workspaces.services import workspace_create

now = timezone.now()
for cli, version in (("claude", "2.0.14 (Claude Code)"), ("codex", "codex-cli 0.46.0"),
                     ("gemini", "0.9.0")):
    CliHealth.objects.create(cli_type=cli, status="healthy", version=version,
                             binary_path=f"/usr/local/bin/{cli}", checked_at=now)
workspace = workspace_create(title=SAMPLE_TITLE, description=SAMPLE_DESCRIPTION)
for (name, instruction), cli in zip(SAMPLE_AGENTS, ("claude", "codex", "claude", "gemini")):
    agent_create(workspace=workspace, name=name, instruction=instruction, cli_type=cli)
for summary in ("Add a dark mode toggle", "Fix the login redirect loop", "Document the API"):
    task_create(workspace=workspace, summary=summary)
busy = task_create(workspace=workspace, summary="Speed up the test suite",
                   description="The suite takes **4 minutes**; get it under one.")
task_status_set(task=busy, status="in_progress", actor=SYSTEM)
TaskQueueItem.objects.filter(task=busy).update(status="in_progress")  # an agent is at work
review = task_create(workspace=workspace, summary="Add rate limiting to the login form")
Task.objects.filter(id=review.id).update(status="in_review")
done = task_create(workspace=workspace, summary="Upgrade Django to 5.2")
Task.objects.filter(id=done.id).update(status="done")
agents = list(workspace.agents.order_by("order"))
comment_create(task=busy, actor=agent_actor(agents[0]), content=PLAN)
comment_create(task=busy, actor=USER, content="Keep the browser tests, they caught real bugs.")
comment_create(task=busy, actor=agent_actor(agents[1]), content=DONE)
run = AgentRun.objects.create(id=new_id(), workspace=workspace, task=busy, agent_id=agents[2].id,
    agent_name=agents[2].name, cli_type="claude", status="running", started_at=now,
    current_action="Running `pytest -q -n 2`", input_tokens=18200, output_tokens=2400,
    cost_usd=0.21, trace_count=4)
for seq, (kind, action, text, detail) in enumerate(TRACES, 1):
    TraceEvent.objects.create(run=run, seq=seq, kind=kind, action_kind=action, text=text,
                              detail=detail, created_at=now)
chat = chat_create(workspace=workspace, title="Set up a docs writer")
ChatMessage.objects.create(id=new_id(), chat=chat, role="user", created_at=now,
    message="Add an agent that keeps the README in sync with the code.")
chat_message_add_agent(chat=chat, agent=None, message=REPLY, actions=[
    {"type": "create_agent", "name": "Docs Writer", "cli_type": "claude", "result": "ok"}])
chat_message_add_system(chat=chat, message="User has uploaded /tmp/malamar/chat/style-guide.md")
# The task in review changed files: snapshots of a folder before and after its run.
import tempfile
from pathlib import Path
from runner import snapshots
folder = Path(tempfile.mkdtemp(prefix="malamar-shot-"))
(folder / "app").mkdir()
(folder / "app" / "login.py").write_text(LOGIN_BEFORE)
(folder / "README.md").write_text("# Shop\\n\\nRun `make dev`.\\n")
before = snapshots.take(folder)
(folder / "app" / "login.py").write_text(LOGIN_AFTER)
(folder / "app" / "limits.py").write_text(LIMITS)
(folder / "README.md").write_text("# Shop\\n\\nRun `make dev`. Logins are rate limited (5/min).\\n")
after = snapshots.take(folder)
AgentRun.objects.create(id=new_id(), workspace=workspace, task=review, agent_id=agents[1].id,
    agent_name=agents[1].name, cli_type="claude", status="completed", started_at=now,
    ended_at=now, working_directory=str(folder), snapshot_store=before.store,
    tree_before=before.tree, tree_after=after.tree, files_changed=3, lines_added=15,
    lines_removed=1, task_files_changed=3, task_lines_added=15, task_lines_removed=1)
# A review note with a line comment on the new file (the line comment is anchored to the run's
# snapshot, as one made in the Changes tab).
from tasks.services import task_review_submit
task_review_submit(task=Task.objects.get(id=review.id), verdict="comment", actor=USER,
    body="Close. One thing before I approve:", line_comments=[{"path": "app/limits.py",
    "line": 8, "end_line": 9, "body": "Two requests at once both read 0 here: use "
    "`cache.add(key, 0, 60)`, then `cache.incr(key)`."}])
# Checks (issue 30): the workspace's tests gate each task; one failed round went back to the
# agents, the next passed.
from tasks.models import CommentKind
from tasks.services import checks_failure_text
from workspaces.services import workspace_update
workspace_update(workspace=workspace, checks=[
    {"name": "tests", "command": "pytest -q"}, {"name": "lint", "command": "ruff check ."}])
gated = task_create(workspace=workspace, summary="Fix the cart total rounding",
    description="`cart.total()` is off by a cent for some discounts.")
comment_create(task=gated, actor=agent_actor(agents[1]),
    content="Rounded the total with `Decimal.quantize` in `cart/total.py`.")
failed_run = AgentRun.objects.create(id=new_id(), workspace=workspace, task=gated, kind="check",
    agent_name="tests", model="pytest -q", cli_type="check", status="failed", exit_code=1,
    started_at=now, ended_at=now, trace_count=1)
TAIL = ("...........F.                                            [100%]\\n"
        "FAILED tests/test_cart.py::test_discounted_total - assert Decimal('9.99') == "
        "Decimal('10.00')\\n1 failed, 12 passed in 11.84s")
TraceEvent.objects.create(run=failed_run, seq=1, kind="output", text=TAIL, created_at=now)
comment_create(task=gated, actor=SYSTEM, kind=CommentKind.CHECKS, content=checks_failure_text({
    "name": "tests", "command": "pytest -q", "exit_code": 1, "tail": TAIL, "tail_lines": 3,
    "run_id": failed_run.id}))
comment_create(task=gated, actor=agent_actor(agents[1]),
    content="The tax was rounded before the discount: it is now applied to the exact amount "
    "and rounded once, at the end.")
Task.objects.filter(id=gated.id).update(status="in_review", checks_status="passed",
    checks_at=now, checks_result=[
        {"name": "tests", "command": "pytest -q", "status": "passed", "exit_code": 0,
         "duration": 12.4, "run_id": failed_run.id},
        {"name": "lint", "command": "ruff check .", "status": "passed", "exit_code": 0,
         "duration": 0.8, "run_id": failed_run.id}])
print(workspace.id, busy.id, chat.id, review.id, gated.id)
"""


def shoot(page, path: Path) -> None:
    page.wait_for_timeout(300)  # let dialogs and fonts settle
    page.screenshot(path=str(path), animations="disabled")
    size = path.stat().st_size
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size:,} B")
    if size > MAX_BYTES:
        sys.exit(f"{path} is {size:,} bytes; keep screenshots under {MAX_BYTES:,}")


def review_shots(page, out: Path) -> None:
    """The review on a desktop: a line comment under its line, a draft, the verdicts."""
    file = page.locator('.change-file[data-change-path="app/limits.py"]')
    last = file.locator("tr.diff__line").filter(has_text="return count >= LIMIT")
    last.locator(".diff__code").click()
    page.locator(".draft-box textarea").fill("Say in the form how long it waits.")
    page.get_by_role("button", name="Add comment").click()
    page.wait_for_selector(".diff__draft")
    file.locator(".diff__comment").evaluate("(el) => el.scrollIntoView({block: 'center'})")
    shoot(page, out / "review-light.png")


def needs_you_shot(browser, url: str, out: Path) -> None:
    """The home page on a 390 px phone while a task waits for review and a reply is unread
    (before the desktop shots open the chat, which marks it read)."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("#home-needs-you .inbox-row[data-kind=chat]")
    shoot(page, out / "needs-you-phone.png")
    context.close()


def phone_shots(browser, base: str, review_id: str, out: Path) -> None:
    """The review on a 390 px phone: the one-line head, the line comment, the big Approve;
    then the Changes tab across the whole width."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(f"{base}?tab=tasks&task={review_id}")
    page.wait_for_selector("#task-dialog[open] .line-anchor")
    page.locator("#task-comments .line-anchor").scroll_into_view_if_needed()
    shoot(page, out / "review-phone.png")
    page.get_by_role("tab", name="Changes").click()
    page.wait_for_selector("#task-dialog .diff__comment")
    page.locator("#task-dialog .diff__comment").scroll_into_view_if_needed()
    shoot(page, out / "review-phone-changes.png")
    context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} not found: install it with `apt-get install chromium`")
    from playwright.sync_api import sync_playwright

    data_dir = Path(tempfile.mkdtemp(prefix="malamar-screenshots-"))
    server = None
    try:
        blank_database(data_dir)  # only the data seeded below, no sample workspace
        result = manage(data_dir, "migrate", "--no-input")
        if result.returncode:
            sys.exit(result.stderr)
        seeded = django_script(data_dir, SEED).stdout.strip().splitlines()[-1]
        workspace_id, task_id, chat_id, review_id, gated_id = seeded.split()
        server = Server(data_dir).start()
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            needs_you_shot(browser, f"{server.url}/", args.out)
            for theme in ("light", "dark"):
                context = browser.new_context(
                    viewport={"width": 1280, "height": 800}, color_scheme=theme
                )
                page = context.new_page()
                base = f"{server.url}/workspaces/{workspace_id}/"
                page.goto(f"{base}?tab=agents")
                page.wait_for_selector("body[data-live-state=open]")
                page.locator(".agent-row").nth(1).hover()  # show the reorder arrows
                shoot(page, args.out / f"workspace-{theme}.png")
                page.goto(f"{base}?tab=tasks")
                page.wait_for_selector("body[data-live-state=open]")
                shoot(page, args.out / f"board-{theme}.png")
                page.goto(f"{base}?tab=tasks&task={task_id}")
                page.wait_for_selector("#task-dialog[open] .comment")
                if theme == "dark":  # the dark shot shows the live activity timeline
                    page.get_by_role("tab", name="Activity").click()
                    page.wait_for_selector("#task-dialog details.run")
                shoot(page, args.out / f"task-{theme}.png")
                page.goto(f"{base}?tab=chat&chat={chat_id}")
                page.wait_for_selector("#chat-dialog[open]")
                shoot(page, args.out / f"chat-{theme}.png")
                if theme == "light":  # the Changes tab of the task in review
                    page.goto(f"{base}?tab=tasks&task={review_id}")
                    page.wait_for_selector("#task-dialog[open]")
                    page.get_by_role("tab", name="Changes").click()
                    page.wait_for_selector("#task-dialog .change-file .diff__line--add")
                    shoot(page, args.out / "changes-light.png")
                    review_shots(page, args.out)
                    page.goto(f"{base}?tab=tasks&task={gated_id}")  # checks gated it
                    page.wait_for_selector("#task-dialog[open] #task-checks")
                    shoot(page, args.out / "checks-light.png")
                context.close()
            phone_shots(browser, f"{server.url}/workspaces/{workspace_id}/", review_id, args.out)
            browser.close()
    finally:
        if server:
            server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
