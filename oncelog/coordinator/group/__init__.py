"""Consumer groups (classic protocol) and committed offsets.

Modules: ``state`` (the state table), ``metadata`` (one group's data), ``codec`` (the
``__consumer_offsets`` record formats and group placement), ``store`` (the OffsetsStore the
broker implements), ``loader`` (replay at start-up), ``results`` (what handlers receive),
``coordinator`` (GroupCoordinator: the decisions and the futures that hold delayed answers).
"""
