"""`GET /api/events`: django-eventstream's SSE stream, fed by the relay, with de-duplication.

The first request starts this process's relay (which waits for the deployment's relay lock) and,
with a channel layer (REDIS_URL), its listener (core.fanout), which feeds the streams of this
server with the events the relay (on whichever server) stored.

django-eventstream can re-read its storage from a stale id under load and resend older events;
each connection drops any event whose id is not above the highest id it already sent.
"""

import re

from django.conf import settings
from django.http import StreamingHttpResponse
from django_eventstream.views import events as eventstream_events

from core import fanout, relay

_EVENT_ID = re.compile(r"^id: (?:[^:\n]*:)?(\d+)$", re.MULTILINE)


def dedupe_blocks(body: str, state: dict) -> str:
    """Drop SSE blocks whose numeric id is not above the highest already sent."""
    kept = []
    for block in body.split("\n\n"):
        match = _EVENT_ID.search(block)
        if match:
            event_id = int(match.group(1))
            if event_id <= state["last"]:
                continue
            state["last"] = event_id
        kept.append(block)
    return "\n\n".join(kept)


async def _deduped(stream):
    state = {"last": 0}
    async for chunk in stream:
        text = chunk.decode() if isinstance(chunk, bytes) else chunk
        out = dedupe_blocks(text, state)
        if out.strip():
            yield out.encode()


def events(request):
    if fanout.enabled():
        fanout.ensure_started()
    relay.ensure_started()
    response = eventstream_events(request, channels=[settings.EVENTS_CHANNEL])
    if isinstance(response, StreamingHttpResponse) and response.is_async:
        response.streaming_content = _deduped(response.streaming_content)
    return response
