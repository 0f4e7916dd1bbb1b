"""The names of Kafka's internal topics, defined once for every layer: the group
coordinator's ``__consumer_offsets`` and the transaction coordinator's
``__transaction_state`` (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME`` and
``Topic.TRANSACTION_STATE_TOPIC_NAME``)."""

from __future__ import annotations

from typing import Final

OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
