"""Which status moves each kind of actor may make (SPECS "Task Actions")."""

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
