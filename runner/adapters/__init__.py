"""One adapter per CLI, looked up by `cli_type`."""

from runner.adapters import claude, codex, gemini, opencode

ADAPTERS = {module.NAME: module for module in (claude, gemini, codex, opencode)}


def adapter_for(cli_type: str):
    return ADAPTERS[cli_type]
