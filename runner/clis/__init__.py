"""The agent CLIs Malamar runs: one class per CLI (`runner/clis/<cli>.py`), registered here.

This registry is the only list of CLI classes; adding a CLI means one module and one line here.
"""

from runner.clis.base import Cli
from runner.clis.claude import Claude
from runner.clis.codex import Codex
from runner.clis.custom import Custom
from runner.clis.gemini import Gemini
from runner.clis.opencode import OpenCode

CLIS: dict[str, Cli] = {
    cli.name: cli for cli in (Claude(), Gemini(), Codex(), OpenCode(), Custom())
}


def cli_for(cli_type: str) -> Cli:
    """The CLI stored as `cli_type` on an agent or run (KeyError for an unknown one)."""
    return CLIS[cli_type]


def cli_label(cli_type: str) -> str:
    """How users know a CLI type (the type itself if unknown, e.g. a removed one)."""
    cli = CLIS.get(cli_type)
    return cli.label if cli else cli_type
