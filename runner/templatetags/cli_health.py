"""Template tags about the CLIs' health (the page-wide "No CLIs available" warning)."""

from django import template

from runner.selectors import first_available_cli

register = template.Library()


@register.simple_tag
def no_cli_available() -> bool:
    return first_available_cli() is None
