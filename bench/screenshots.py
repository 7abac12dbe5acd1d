"""Screenshots of the workspace page for the README, in the light and the dark theme.

Starts a real server on a temp data dir with the sample workspace, opens its Agents tab in
Debian's Chromium at 1280x800, and writes docs/workspace-light.png and docs/workspace-dark.png
(each kept under 200 KB).

    .venv/bin/python bench/screenshots.py [--out docs]
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import Server, django_script, manage  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
MAX_BYTES = 200_000

SEED = """
from django.utils import timezone
from agents.services import agent_create
from core.actors import SYSTEM
from core.first_launch import SAMPLE_AGENTS, SAMPLE_DESCRIPTION, SAMPLE_TITLE
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
task_status_set(task=task_create(workspace=workspace, summary="Speed up the test suite"),
                status="in_progress", actor=SYSTEM)
print(workspace.id)
"""


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
        result = manage(data_dir, "migrate", "--no-input")
        if result.returncode:
            sys.exit(result.stderr)
        workspace_id = django_script(data_dir, SEED).stdout.strip().splitlines()[-1]
        server = Server(data_dir).start()
        args.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for theme in ("light", "dark"):
                context = browser.new_context(
                    viewport={"width": 1280, "height": 800}, color_scheme=theme
                )
                page = context.new_page()
                page.goto(f"{server.url}/workspaces/{workspace_id}/?tab=agents")
                page.wait_for_selector("body[data-live-state=open]")
                page.locator(".agent-row").nth(1).hover()  # show the reorder arrows
                path = args.out / f"workspace-{theme}.png"
                page.screenshot(path=str(path), animations="disabled")
                size = path.stat().st_size
                print(
                    f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size:,} B"
                )
                if size > MAX_BYTES:
                    sys.exit(f"{path} is {size:,} bytes; keep screenshots under {MAX_BYTES:,}")
                context.close()
            browser.close()
    finally:
        if server:
            server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
