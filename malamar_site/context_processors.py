"""Template context every page of the site may use."""

from malamar_site.needs_you import LIVE_EVENTS, needs_you_count, needs_you_home


def needs_you(request) -> dict:
    """The header's "Needs you" count and the home page's section. Callables: a template calls
    one when it shows it (once, in a `with` or an `include … with`), so a fragment that does not
    costs no query."""
    return {
        "needs_you_count": needs_you_count,
        "needs_you_home": needs_you_home,
        "needs_you_events": LIVE_EVENTS,
    }
