from agents.models import CLI_PREFERENCE, CliType
from runner.models import CliHealth, CliHealthStatus


def cli_health_all() -> list[dict]:
    """Each CLI's stored health, "not_checked" until the worker has checked it."""
    rows = {row.cli_type: row for row in CliHealth.objects.all()}
    result = []
    for cli in CliType:
        row = rows.get(cli.value) or CliHealth(cli_type=cli.value)
        result.append(
            {
                "cli_type": cli.value,
                "name": cli.label,
                "status": row.status,
                "available": row.is_available,
                "error": row.error,
                "version": row.version,
                "binary_path": row.binary_path,
                "checked_at": row.checked_at,
                "refresh_requested_at": row.refresh_requested_at,
            }
        )
    return result


def cli_available(cli_type: str) -> bool:
    row = CliHealth.objects.filter(cli_type=cli_type).first()
    return row is None or row.is_available


def first_available_cli() -> str | None:
    """The spec's preference order Claude → Codex → Gemini → OpenCode; None if all unhealthy."""
    for cli in CLI_PREFERENCE:
        if cli_available(cli.value):
            return cli.value
    return None


def healthy_count() -> int:
    return CliHealth.objects.filter(status=CliHealthStatus.HEALTHY).count()
