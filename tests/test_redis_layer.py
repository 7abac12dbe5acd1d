"""The Redis channel layer of live events across servers (core.fanout), against a real Redis:
an idle wait for a message is not an error.

channels-redis waits with a blocking pop of 5 s (`brpop_timeout`) and then pops again. A
redis-py socket timeout no longer than that (redis-py 8's default is 5 s) ends the wait in a
TimeoutError whenever the empty answer comes a moment late, and the listener logged "Live
events: the channel layer failed (receive)" and paused 1 s while Redis was healthy. The proxy
delays every answer a little, as a loaded machine does, so the race is lost every time."""

import asyncio

import pytest
from channels_redis.core import RedisChannelLayer

from core import config
from tests.live import FreezableProxy
from tests.services import Redis

# A real Redis, and a real 5-s blocking pop waited out: ordered first.
pytestmark = pytest.mark.live

REPLY_DELAY = 0.5  # seconds each Redis answer travels: well under what the timeouts allow


@pytest.fixture(scope="module")
def redis():
    server = Redis().start()
    yield server
    server.stop()


def layer_for(url: str) -> RedisChannelLayer:
    layer_config = config.channel_layers(url)["default"]
    assert layer_config["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    return RedisChannelLayer(**layer_config["CONFIG"])


def test_reads_outlast_the_blocking_pop(redis):
    layer = layer_for(redis.url)
    pool = layer.create_pool(0)
    assert pool.connection_kwargs["socket_timeout"] > layer.brpop_timeout + REPLY_DELAY


async def receive_after_an_idle_pop(url: str, proxy_requests) -> dict:
    """Wait on an empty channel until Redis answered one blocking pop with nothing and the
    layer popped again, then send a message: what the waiting receive returns (or raises)."""
    layer = layer_for(url)
    channel = await layer.new_channel()
    receiving = asyncio.ensure_future(layer.receive(channel))
    try:
        while proxy_requests().count(b"BZPOPMIN") < 2 and not receiving.done():
            await asyncio.sleep(0.05)
        if not receiving.done():
            await layer.send(channel, {"type": "malamar.events", "events": []})
        return await receiving
    finally:
        receiving.cancel()
        await layer.flush()


def test_an_idle_wait_for_a_message_is_not_an_error(redis):
    proxy = FreezableProxy("127.0.0.1", redis.port, reply_delay=REPLY_DELAY).start()
    try:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        message = asyncio.run(receive_after_an_idle_pop(url, lambda: bytes(proxy.requested)))
    finally:
        proxy.close()
    assert message == {"type": "malamar.events", "events": []}
