"""Consumer groups (classic protocol) and committed offsets, including offsets committed
inside transactions (TxnOffsetCommit: pending per producer until its COMMIT/ABORT marker).

Modules, by role (Kafka's GroupCoordinator / GroupMetadataManager split):
``state`` (the state table), ``metadata`` (one group's data, with its pending
transactional offsets), ``codec`` (the ``__consumer_offsets`` record formats and group
placement), ``store`` (the OffsetsStore the broker implements: plain and transactional
appends, replay with producer ids and markers), ``loader`` (replay at start-up),
``results`` (what handlers receive), ``table`` (the live groups and the records written for
them), ``membership`` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup decisions, sans-IO) with
``rebalance`` (the phases, timeouts and the events a decision produces), ``offsets``
(commits, transactional offsets and their markers, fetch, deletion, retention), and
``coordinator`` (GroupCoordinator: the async shell — futures for delayed answers, the timer
loop, loading; ``on_txn_marker`` is the broker's callback).
"""
