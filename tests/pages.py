"""Helpers for the page tests: htmx-style requests and HTML checks."""

import json
import re

from tests.htmltree import parse


def hx(client, method: str, url: str, data=None, target: str | None = None, **extra):
    """A request as htmx sends it (HX-Request, optional HX-Target)."""
    headers = {"HTTP_HX_REQUEST": "true", **extra}
    if target:
        headers["HTTP_HX_TARGET"] = target
    return getattr(client, method)(url, data or {}, **headers)


def triggers(response) -> dict:
    """The events a response asks the page to fire (HX-Trigger)."""
    raw = response.headers.get("HX-Trigger")
    return json.loads(raw) if raw else {}


def live_events(page: str, region_id: str) -> set[str]:
    """The live events that refresh a page's region (its `data-live`, README "Live refreshes");
    fails unless the region refreshes by the live policy (hx-trigger "live")."""
    from tests.htmltree import parse

    region = parse(page).by_id(region_id)
    assert region is not None, f"no #{region_id}"
    assert region.attrs.get("hx-trigger", "").split(",")[-1].strip() == "live", region.attrs
    return set(region.attrs["data-live"].split())


def html(response) -> str:
    return response.content.decode()


def field_error_is_tied(page: str, field_id: str) -> bool:
    """The field is marked invalid and points at its error text (aria-describedby)."""
    tag = re.search(rf"<(?:input|textarea|select)[^>]*\bid=\"{field_id}\"[^>]*>", page)
    if not tag:
        return False
    described = re.search(r'aria-describedby="([^"]*)"', tag.group(0))
    return (
        'aria-invalid="true"' in tag.group(0)
        and described is not None
        and f"{field_id}_error" in described.group(1).split()
        and f'id="{field_id}_error"' in page
    )


def element_text(page: str, element_id: str) -> str | None:
    """The text of the element with this id (tags dropped, entities decoded), or None."""
    element = parse(page).by_id(element_id)
    return element.text if element is not None else None


def elements(page: str, tag: str, **attrs: str) -> list[dict]:
    """The attributes (entities decoded) of every <tag> in the parsed page that has `attrs`."""
    return [el.attrs for el in parse(page).find_all(tag=tag, **attrs)]
