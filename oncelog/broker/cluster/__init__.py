"""The cluster's I/O shells: the broker's metadata cache, the elected controller, replica
management and fetching (the decisions they apply are sans-IO, in oncelog.cluster)."""
