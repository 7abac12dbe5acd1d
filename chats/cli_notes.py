"""What a chat says when none of its agents has a CLI that can answer (one wording for the
send refusal, the popup's banner and its notes)."""

NO_CLI = "No CLI available"


def no_cli_reason(broken: list[str]) -> str:
    """`broken`: the CLIs that failed their health check, as the user knows them (e.g. "Gemini
    CLI (the CLI override)"); empty when every CLI failed."""
    if not broken:
        return (
            "Every CLI failed its health check. Fix one in Settings → CLIs (or refresh the "
            "health check) and send again."
        )
    its = "its" if len(broken) == 1 else "their"
    return (
        f"{', '.join(broken)} failed {its} health check. "
        "Choose another CLI for this chat or fix it in Settings → CLIs."
    )


def no_cli_message(broken: list[str]) -> str:
    return f"{NO_CLI}: {no_cli_reason(broken)}"
