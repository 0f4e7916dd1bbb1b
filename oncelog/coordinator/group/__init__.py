"""Consumer groups (classic protocol) and committed offsets, including offsets committed
inside transactions (TxnOffsetCommit: pending per producer until its COMMIT/ABORT marker).

Modules: ``state`` (the state table), ``metadata`` (one group's data, with its pending
transactional offsets), ``codec`` (the ``__consumer_offsets`` record formats and group
placement), ``store`` (the OffsetsStore the broker implements: plain and transactional
appends, replay with producer ids and markers), ``loader`` (replay at start-up),
``results`` (what handlers receive), ``coordinator`` (GroupCoordinator: the decisions and
the futures that hold delayed answers; ``on_txn_marker`` is the broker's callback).
"""
