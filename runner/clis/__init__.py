"""The agent CLIs Malamar runs: one class per CLI (`runner/clis/<cli>.py`), registered here.

This registry is the only list of CLIs: the classes, their names and labels as the choices of
every CLI field (`CliType`), and the spec's order of preference. Adding a CLI means one module
and one line here.
"""

from django.db import models

from runner.clis.base import Cli
from runner.clis.claude import Claude
from runner.clis.codex import Codex
from runner.clis.custom import Custom
from runner.clis.gemini import Gemini
from runner.clis.opencode import OpenCode

# The installed CLIs, in the order pages list them.
INSTALLED: tuple[Cli, ...] = (Claude(), Gemini(), Codex(), OpenCode())

# A fifth kind of agent CLI, set up per agent (binary, argument template, env, output mode)
# rather than installed once: not a CliType, so nothing that lists the installed CLIs (settings,
# health rounds, chat overrides, doctor) grows a "custom" entry.
CUSTOM = Custom()
CUSTOM_CLI = CUSTOM.name
CUSTOM_CLI_LABEL = CUSTOM.label

CLIS: dict[str, Cli] = {cli.name: cli for cli in (*INSTALLED, CUSTOM)}

# The installed CLIs as choices: CliType.CLAUDE == "claude", labelled "Claude Code".
CliType = models.TextChoices(
    "CliType", [(cli.name.upper(), (cli.name, cli.label)) for cli in INSTALLED]
)
AGENT_CLI_CHOICES = [*CliType.choices, (CUSTOM_CLI, CUSTOM_CLI_LABEL)]

# Spec: the first healthy CLI in this order is the default for new agents and for Malamar.
CLI_PREFERENCE = (CliType.CLAUDE, CliType.CODEX, CliType.GEMINI, CliType.OPENCODE)


def cli_for(cli_type: str) -> Cli:
    """The CLI stored as `cli_type` on an agent or run (KeyError for an unknown one)."""
    return CLIS[cli_type]


def cli_label(cli_type: str) -> str:
    """How users know a CLI type (the type itself if unknown, e.g. a removed one)."""
    cli = CLIS.get(cli_type)
    return cli.label if cli else cli_type


def custom_health_key(agent_id: str) -> str:
    """The health row of a custom-command agent's CLI (each checks its own command)."""
    return f"{CUSTOM_CLI}:{agent_id}"
