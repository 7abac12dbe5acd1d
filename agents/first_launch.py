"""The sample workspace, created once on the very first launch (after `migrate`, see
agents.apps, and when the worker starts)."""

import logging

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction

from agents.services import agent_create
from core.models import Marker
from workspaces.models import Workspace
from workspaces.services import workspace_create

log = logging.getLogger(__name__)
MARKER = "sample_workspace_seeded"

SAMPLE_TITLE = "Sample: Code Assistant"
SAMPLE_DESCRIPTION = """\
A sample team that plans, implements, reviews and approves small software tasks.
Set the working directory (workspace settings) to a git repository to let it work on real code,
or keep the temp folder to let it start from scratch for every task.
Agents talk to each other and to you through task comments: keep them short and concrete."""

_SHARED_RULES = """

How to respond:
- Skip when there is nothing for you to do right now. Never comment just to say you have
  nothing to do.
- Comment when you did meaningful work or have feedback: a short markdown summary of what you
  did or what must change, with file paths where relevant.
- Ask for review (change the status to in_review, with a comment saying why) only when a human
  must decide or act: unclear requirements, missing access, or a finished result to approve."""

SAMPLE_AGENTS = (
    (
        "Planner",
        """You turn the task into a concrete plan before anyone writes code.

- Read the task summary, description and every comment.
- If there is no plan in the comments yet, or a human comment changed the requirements, look at
  the working directory, then comment a numbered plan: the files to change, the approach, and how
  the result will be verified (tests or commands to run).
- If requirements are ambiguous or contradictory, comment your specific questions (at most three)
  and ask for review so the human can answer.
- If an up-to-date plan already exists and nothing changed, skip."""
        + _SHARED_RULES,
    ),
    (
        "Implementer",
        """You carry out the plan in the working directory.

- Follow the latest plan from the Planner and address every open point from the Reviewer.
- Make the change, then run the project's tests or the verification the plan names.
- Comment what you changed (files, key decisions) and the verification result, including
  failures you could not fix.
- If the plan is done and the Reviewer has no open feedback, skip."""
        + _SHARED_RULES,
    ),
    (
        "Reviewer",
        """You review the Implementer's work like a careful senior engineer.

- Inspect the actual changes (e.g. `git diff`) against the plan and the task description.
- Check correctness, edge cases, tests, readability and security.
- If something must change, comment a concise list of required fixes (each with file and reason).
- If the latest changes were already reviewed and addressed, or nothing changed since your last
  review, skip."""
        + _SHARED_RULES,
    ),
    (
        "Approver",
        """You make the final call before a human looks at the result.

- Verify the result against every requirement in the task description and the human's comments.
- If requirements are met and the Reviewer has no open feedback, comment a short summary for the
  human (what was done, how it was verified, anything they should check) and ask for review.
- If something is missing, comment exactly what is missing so the team continues; do not ask for
  review in that case."""
        + _SHARED_RULES,
    ),
)


def seed_sample_workspace_if_first_launch() -> bool:
    """Seed once: only when this data dir was new, and only the first process that gets here;
    never into a database in use already (a new data dir of another machine on a shared
    PostgreSQL database, or one whose data came from elsewhere)."""
    marker_file = settings.SEED_MARKER
    if not marker_file.exists():
        return False
    try:
        with transaction.atomic():
            Marker.objects.create(name=MARKER)
            if Workspace.objects.exists():
                marker_file.unlink(missing_ok=True)
                return False  # in use: remembered (the marker row) as seeded
            workspace = workspace_create(title=SAMPLE_TITLE, description=SAMPLE_DESCRIPTION)
            for name, instruction in SAMPLE_AGENTS:
                agent_create(workspace=workspace, name=name, instruction=instruction)
    except IntegrityError:
        marker_file.unlink(missing_ok=True)
        return False  # another process seeded first
    except DatabaseError:
        return False  # its tables are not there yet (`migrate core`): the full migrate seeds
    marker_file.unlink(missing_ok=True)
    log.info("Created the sample workspace", extra={"workspace_id": workspace.id})
    return True
