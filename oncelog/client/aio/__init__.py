"""The asyncio core of oncelog.client: ``AIOProducer``, ``AIOConsumer``, ``AIOAdmin``.

Use these directly from asyncio code (every method is a coroutine except the trivial
accessors); the synchronous classes in ``oncelog.client`` run them on a loop thread.
"""

from oncelog.client.aio.admin import AIOAdmin
from oncelog.client.aio.consumer import AIOConsumer
from oncelog.client.aio.producer import AIOProducer

__all__ = ["AIOAdmin", "AIOConsumer", "AIOProducer"]
