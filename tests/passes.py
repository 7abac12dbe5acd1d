"""Task passes run in the test's own thread, as the worker's thread runs them (no worker)."""

import threading

from agents.services import agent_create
from worker import pickup
from worker.pipeline import TaskPass
from workspaces.services import workspace_create


def team(title: str, *agents):
    """A workspace and its agents, each `(name, cli)`."""
    workspace = workspace_create(title=title)
    made = [
        agent_create(workspace=workspace, name=name, instruction="Work.", cli_type=cli)
        for name, cli in agents
    ]
    return workspace, made


def run_workspace(workspace) -> int:
    """Run the workspace's queue as the worker's thread does, until it has nothing to pick."""
    passes = 0
    while (item := pickup.claim_next(workspace.id)) is not None:
        TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
        passes += 1
        assert passes < 20, "the queue never empties"
    return passes
