"""Which status moves each kind of actor may make (SPECS "Task Actions"), and why the person
may not make the others (the board explains a refused drop with it)."""

from tasks.models import TaskStatus

# Status moves a user may make.
USER_MOVES = {
    TaskStatus.IN_PROGRESS: {TaskStatus.IN_REVIEW},
    TaskStatus.IN_REVIEW: {TaskStatus.TODO, TaskStatus.DONE},
    TaskStatus.DONE: {TaskStatus.TODO},
    TaskStatus.TODO: set(),
}
# Agents may only ask for review of the task they work on.
AGENT_MOVES = {TaskStatus.IN_PROGRESS: {TaskStatus.IN_REVIEW}}
# The runner picks up, demotes and finishes tasks.
SYSTEM_MOVES = {
    TaskStatus.TODO: {TaskStatus.IN_PROGRESS, TaskStatus.IN_REVIEW},
    TaskStatus.IN_PROGRESS: {TaskStatus.TODO, TaskStatus.IN_REVIEW},
}
# By actor type.
MOVES = {"user": USER_MOVES, "agent": AGENT_MOVES, "system": SYSTEM_MOVES}

# Why the person cannot make a move, by the status it starts from (the moves they can make are
# in USER_MOVES; the target only matters for Todo → In Progress).
_USER_REFUSALS = {
    TaskStatus.TODO: "the agents pick up Todo tasks themselves, in order (Prioritize puts one "
    "first); it reaches In Review when they are done",
    TaskStatus.IN_PROGRESS: "the agents are working on it: move it to In Review (or Cancel) "
    "to stop them first",
    TaskStatus.IN_REVIEW: "move it to Todo and the agents pick it up from there",
    TaskStatus.DONE: "move it back to Todo and the agents pick it up from there",
}


def user_refusal(old: str, new: str) -> str:
    """Why the person may not move a task from `old` to `new` ("" when they may)."""
    if new in USER_MOVES.get(old, set()) or old == new:
        return ""
    return _USER_REFUSALS.get(old, "")
