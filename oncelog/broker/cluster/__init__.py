"""The cluster's I/O shells: the controller, the replica manager and fetchers, the metadata
cache (the decisions they act on are sans-IO, in oncelog.cluster)."""
