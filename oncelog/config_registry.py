"""The registry data: every broker and topic config key oncelog knows, with Kafka's names,
types, defaults, validation and documentation (``BROKER_KEYS``, ``TOPIC_CONFIGS``), the
broker configs each topic config defaults to (its synonyms, and their units), and the
parsers of the values that need one (``log.dirs``, ``storage.engine``).
Configs that oncelog stores and describes but does not act on yet say why in ``not_yet``
(listed in docs/configuration.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from oncelog.config_key import INT_MAX, LONG_MAX, ConfigKey, ConfigType, Dynamic
from oncelog.security.acl import AUTHORIZER_CLASSES
from oncelog.security.tls import CLIENT_AUTH

STORAGE_ENGINE_SCHEMES = ("file", "memory")
"""Partition engines ``storage.engine`` may name (see oncelog.storage.engines)."""


def storage_engine_scheme(url: str) -> str:
    """The scheme of a ``storage.engine`` URL (``file:``, ``memory:``); ValueError naming
    the known ones for any other."""
    scheme, colon, _rest = url.partition(":")
    if not colon or scheme not in STORAGE_ENGINE_SCHEMES:
        known = ", ".join(f"{s}:" for s in STORAGE_ENGINE_SCHEMES)
        raise ValueError(f"unknown storage engine {url!r}; known engines: {known}")
    return scheme


def _authorizer_class(value: Any) -> str | None:
    if value in ("", None, *AUTHORIZER_CLASSES):
        return None
    return f"oncelog has one authorizer: {AUTHORIZER_CLASSES[0]} (or empty for none)"


def _log_dirs_text(text: str) -> str:
    if not split_log_dirs(text):
        raise ValueError("log.dirs names no directory")
    return text


def split_log_dirs(text: str) -> list[str]:
    """The directories of a ``log.dirs`` value (comma-separated, blanks dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _engine_url(text: str) -> str:
    storage_engine_scheme(text)
    return text


def _gzip_level(value: Any) -> str | None:
    if value == -1 or 1 <= value <= 9:
        return None
    return "Value must be between 1 and 9 or equal to -1"


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

REPLICATION = "replication is not throttled"
REMOTE = "tiered (remote) storage is not implemented"
T, B, INT, L, S, D, LS, PW = (
    ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.INT, ConfigType.LONG,
    ConfigType.SHORT, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD,
)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _key(name: str, type_: ConfigType, default: Any, doc: str, **kwargs: Any) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, **kwargs)


# Every topic config of Kafka 4.4 (tests/integration/test_configs_kafka.py compares this
# list with a live Kafka 4.4), with the broker configs each defaults to.
_TOPIC_KEYS = [
    _key("cleanup.policy", LS, "delete", "How old segments are discarded: delete (by "
         "retention.ms / retention.bytes), compact (keep the last record per key), or both.",
         choices=CLEANUP_POLICIES, synonyms=("log.cleanup.policy",)),
    _key("compression.gzip.level", INT, -1, "gzip level used when compression.type is gzip "
         "(-1: the codec's default).", validator=_gzip_level,
         synonyms=("compression.gzip.level",)),
    _key("compression.lz4.level", INT, 9, "lz4 level used when compression.type is lz4.",
         at_least=1, at_most=17, synonyms=("compression.lz4.level",)),
    _key("compression.type", T, "producer", "Codec of the batches stored: producer (keep "
         "what the producer sent), uncompressed, gzip, snappy, lz4 or zstd.",
         choices=COMPRESSION_TYPES, synonyms=("compression.type",),
         not_yet="batches are stored as the producer sent them (no recompression yet)"),
    _key("compression.zstd.level", INT, 3, "zstd level used when compression.type is zstd.",
         at_least=-131072, at_most=22, synonyms=("compression.zstd.level",)),
    _key("delete.retention.ms", L, 86400000, "How long delete tombstones stay in a "
         "compacted topic.", at_least=0, synonyms=("log.cleaner.delete.retention.ms",)),
    _key("errors.deadletterqueue.group.enable", B, False, "Whether share groups may send "
         "undeliverable records of this topic to a dead-letter queue.",
         not_yet="share groups are not implemented"),
    _key("file.delete.delay.ms", L, 60000, "Delay before a deleted segment's files are "
         "removed from disk.", at_least=0, synonyms=("log.segment.delete.delay.ms",),
         not_yet="segments are removed at once when retention deletes them"),
    _key("flush.messages", L, LONG_MAX, "fsync the log after this many records.",
         at_least=1, synonyms=("log.flush.interval.messages",)),
    _key("flush.ms", L, LONG_MAX, "fsync the log when its oldest unflushed record is this "
         "old.", at_least=0, synonyms=("log.flush.interval.ms",
                                       "log.flush.scheduler.interval.ms")),
    _key("follower.replication.throttled.replicas", LS, "", "Replicas whose follower "
         "fetches are throttled.", not_yet=REPLICATION),
    _key("index.interval.bytes", INT, 4096, "Bytes of log between two offset index entries.",
         at_least=0, synonyms=("log.index.interval.bytes",)),
    _key("leader.replication.throttled.replicas", LS, "", "Replicas whose leader side of "
         "replication is throttled.", not_yet=REPLICATION),
    _key("local.retention.bytes", L, -2, "Bytes kept on local disk when remote storage is "
         "on (-2: retention.bytes).", at_least=-2, synonyms=("log.local.retention.bytes",),
         not_yet=REMOTE),
    _key("local.retention.ms", L, -2, "Time kept on local disk when remote storage is on "
         "(-2: retention.ms).", at_least=-2, synonyms=("log.local.retention.ms",),
         not_yet=REMOTE),
    _key("max.compaction.lag.ms", L, LONG_MAX, "Longest a record may stay uncompacted.",
         at_least=1, synonyms=("log.cleaner.max.compaction.lag.ms",)),
    _key("max.decompressed.message.bytes", INT, 2147483639, "Largest size a compressed "
         "batch may decompress to.", synonyms=("max.decompressed.message.bytes",),
         not_yet="decompressed sizes are not limited yet"),
    _key("max.message.bytes", INT, 1048588, "Largest record batch the topic accepts.",
         at_least=0, synonyms=("message.max.bytes",)),
    _key("message.timestamp.after.max.ms", L, 3600000, "How far in the future a record's "
         "CreateTime may be.", at_least=0,
         synonyms=("log.message.timestamp.after.max.ms",),
         not_yet="record timestamps are not checked against the clock yet"),
    _key("message.timestamp.before.max.ms", L, LONG_MAX, "How far in the past a record's "
         "CreateTime may be.", at_least=0,
         synonyms=("log.message.timestamp.before.max.ms",),
         not_yet="record timestamps are not checked against the clock yet"),
    _key("message.timestamp.type", T, "CreateTime", "Which timestamp records carry: the "
         "producer's (CreateTime) or the broker's append time (LogAppendTime).",
         choices=TIMESTAMP_TYPES, synonyms=("log.message.timestamp.type",)),
    _key("min.cleanable.dirty.ratio", D, 0.5, "Share of uncompacted log that triggers "
         "compaction.", at_least=0, at_most=1, synonyms=("log.cleaner.min.cleanable.ratio",)),
    _key("min.compaction.lag.ms", L, 0, "Shortest time a record stays uncompacted.",
         at_least=0, synonyms=("log.cleaner.min.compaction.lag.ms",)),
    _key("min.insync.replicas", INT, 1, "In-sync replicas an acks=all write needs.",
         at_least=1, synonyms=("min.insync.replicas",)),
    _key("preallocate", B, False, "Preallocate segment files when they are created.",
         synonyms=("log.preallocate",), not_yet="segment files grow as they are written"),
    _key("remote.copy.lag.bytes", L, -1, "Bytes of local log not yet copied to remote "
         "storage before copying is forced.", synonyms=("log.remote.copy.lag.bytes",),
         not_yet=REMOTE),
    _key("remote.copy.lag.ms", L, 0, "Age of local log not yet copied to remote storage "
         "before copying is forced.", synonyms=("log.remote.copy.lag.ms",), not_yet=REMOTE),
    _key("remote.log.copy.disable", B, False, "Stop copying segments to remote storage.",
         not_yet=REMOTE),
    _key("remote.log.delete.on.disable", B, False, "Delete remote data when remote "
         "storage is turned off.", not_yet=REMOTE),
    _key("remote.storage.enable", B, False, "Keep old segments in remote storage.",
         not_yet=REMOTE),
    _key("retention.bytes", L, -1, "Delete the oldest segments while a partition is larger "
         "than this (-1: no size limit).", synonyms=("log.retention.bytes",)),
    _key("retention.ms", L, 604800000, "Delete segments whose newest record is older than "
         "this (-1: no time limit).", at_least=-1,
         synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    # Kafka 4.x requires at least 1 MiB; oncelog allows small segments (tests roll them).
    _key("segment.bytes", INT, 1073741824, "Roll a new segment when the active one reaches "
         "this size.", at_least=14, synonyms=("log.segment.bytes",)),
    _key("segment.index.bytes", INT, 10485760, "Largest size of a segment's index files.",
         at_least=4, synonyms=("log.index.size.max.bytes",)),
    _key("segment.jitter.ms", L, 0, "Random time subtracted from segment.ms per segment.",
         at_least=0, synonyms=("log.roll.jitter.ms", "log.roll.jitter.hours"),
         not_yet="segments roll exactly at segment.ms"),
    _key("segment.ms", L, 604800000, "Roll a new segment when the active one is this old.",
         at_least=1, synonyms=("log.roll.ms", "log.roll.hours")),
    _key("unclean.leader.election.enable", B, False, "Let an out-of-sync replica become "
         "leader.", synonyms=("unclean.leader.election.enable",)),
]
TOPIC_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _TOPIC_KEYS}

# Broker configs given in other units than the topic config they feed (ms per unit).
SYNONYM_UNIT_MS: dict[str, int] = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}

CW = Dynamic.CLUSTER_WIDE
_BROKER_KEYS = [
    _key("node.id", INT, 1, "This broker's id.", at_least=0),
    _key("log.dirs", LS, "./data", "Comma-separated directories for partition data; new "
         "partitions go to the one holding the fewest. The first (or --data-dir) also holds "
         "topics.json.", parser=_log_dirs_text),
    _key("storage.engine", T, "file:", "Partition engine: file: (segments on disk) or "
         "memory: (lost on stop).", parser=_engine_url),
    _key("listeners", LS, "PLAINTEXT://:9092", "Comma-separated NAME://HOST:PORT the "
         "broker listens on, one server each (oncelog serve --listen HOST:PORT sets the "
         "PLAINTEXT one)."),
    _key("advertised.listeners", LS, None, "NAME://HOST:PORT clients are told to connect "
         "to, per listener name (default: listeners; --advertised sets the PLAINTEXT one)."),
    _key("listener.security.protocol.map", T,
         "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
         "Security protocol of each listener name (NAME:PROTOCOL, comma-separated)."),
    _key("inter.broker.listener.name", T, None, "Listener brokers use between themselves "
         "(default: the listener named after security.inter.broker.protocol)."),
    _key("security.inter.broker.protocol", T, "PLAINTEXT", "Security protocol between "
         "brokers; only one of it and inter.broker.listener.name may be set.",
         choices=SECURITY_PROTOCOLS),
    # TLS (oncelog.security.tls); each may be set per listener as
    # listener.name.<lowercase listener name>.ssl.*.
    _key("ssl.keystore.location", T, None, "PEM file with this broker's certificate chain "
         "and private key (SSL listeners; also the client certificate between brokers)."),
    _key("ssl.keystore.type", T, "JKS", "Format of the keystore file; oncelog reads PEM."),
    _key("ssl.keystore.password", PW, None, "Password of the keystore (refused with PEM "
         "stores, as Kafka does: only ssl.key.password applies).",
         sensitive=True),
    _key("ssl.key.password", PW, None, "Password of the private key in the keystore file.",
         sensitive=True),
    _key("ssl.truststore.location", T, None, "PEM bundle of the CAs trusted for client "
         "certificates and, between brokers, for the other brokers' certificates."),
    _key("ssl.truststore.type", T, "JKS", "Format of the truststore file; oncelog reads "
         "PEM."),
    _key("ssl.truststore.password", PW, None, "Password of the truststore (refused with "
         "PEM stores, as Kafka does).",
         sensitive=True),
    _key("ssl.client.auth", T, "none", "Client certificates on SSL listeners: required, "
         "requested (verified if presented) or none.", choices=CLIENT_AUTH),
    _key("ssl.enabled.protocols", LS, "TLSv1.2,TLSv1.3", "TLS versions allowed."),
    _key("ssl.protocol", T, "TLSv1.3", "TLS protocol of the context (TLSv1.2 leaves TLS 1.3 "
         "out)."),
    _key("ssl.cipher.suites", LS, "", "TLS 1.2 cipher suites allowed (OpenSSL names; "
         "empty: the defaults)."),
    _key("ssl.endpoint.identification.algorithm", T, "https", "Between brokers: https "
         "checks the other broker's host name against its certificate, empty does not."),
    _key("ssl.principal.mapping.rules", T, "DEFAULT", "How a client certificate's subject "
         "becomes a principal: DEFAULT is User:<subject DN in RFC 2253 form>.",
         choices=("DEFAULT",)),
    _key("auto.create.topics.enable", B, True, "Create a topic when a client first uses it."),
    _key("num.partitions", INT, 1, "Partition count of auto-created topics.", at_least=1),
    _key("default.replication.factor", INT, 1, "Replication factor of auto-created topics.",
         at_least=1),
    _key("delete.topic.enable", B, True, "Allow DeleteTopics."),
    _key("log.segment.bytes", INT, 1073741824, "Default segment.bytes.", at_least=14,
         dynamic=CW),
    _key("log.roll.ms", L, None, "Default segment.ms.", at_least=1, dynamic=CW),
    _key("log.roll.hours", INT, 168, "Default segment.ms in hours (if log.roll.ms is unset).",
         at_least=1),
    _key("log.roll.jitter.ms", L, None, "Default segment.jitter.ms.", dynamic=CW),
    _key("log.roll.jitter.hours", INT, 0, "Default segment.jitter.ms in hours.", at_least=0),
    _key("log.retention.ms", L, None, "Default retention.ms.", at_least=-1, dynamic=CW),
    _key("log.retention.minutes", INT, None, "Default retention.ms in minutes (if "
         "log.retention.ms is unset)."),
    _key("log.retention.hours", INT, 168, "Default retention.ms in hours (if neither "
         "log.retention.ms nor log.retention.minutes is set)."),
    _key("log.retention.check.interval.ms", L, 300000, "How often retention runs.",
         at_least=1),
    _key("log.cleaner.enable", B, True, "Run the log cleaner (compaction of topics whose "
         "cleanup.policy includes compact)."),
    _key("log.cleaner.threads", INT, 1, "Cleaner threads. oncelog runs at most one worker "
         "(sized for a 2-core machine): values above 1 are accepted and run as one.",
         at_least=0),
    _key("log.cleaner.backoff.ms", L, 15000, "Pause of the cleaner when no log needs "
         "cleaning.", at_least=0),
    _key("log.cleaner.dedupe.buffer.size", L, 134217728, "Memory for the cleaner's offset "
         "map (24 bytes a key): bounds the keys one pass can deduplicate.", at_least=0),
    _key("log.flush.interval.ms", L, None, "Default flush.ms.", dynamic=CW),
    _key("log.flush.scheduler.interval.ms", L, LONG_MAX, "How often the flush policy is "
         "checked; also the default flush.ms."),
    _key("socket.request.max.bytes", INT, 104857600, "Largest request accepted.", at_least=1),
    _key("max.connections", INT, INT_MAX, "Most client connections open at once.",
         at_least=0, dynamic=CW),
    _key("connections.max.idle.ms", L, 600000, "Close connections idle this long."),
    # SASL (oncelog.broker.sasl). Kafka's sasl.enabled.mechanisms default is GSSAPI, which
    # oncelog does not implement (docs/compatibility.md).
    _key("sasl.enabled.mechanisms", LS, "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms "
         "SASL listeners accept: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512."),
    _key("sasl.mechanism.inter.broker.protocol", T, "SCRAM-SHA-512", "SASL mechanism of "
         "this broker's connections to the others on a SASL inter-broker listener (Kafka's "
         "default, GSSAPI, is not implemented)."),
    _key("connections.max.reauth.ms", L, 0, "Lifetime of a SASL session (KIP-368): the "
         "client must re-authenticate before it ends or its connection is closed; 0: "
         "sessions never expire.", at_least=0),
    _key("connection.failed.authentication.delay.ms", INT, 100, "How long the answer to a "
         "failed authentication and the close of its connection are delayed (must be below "
         "connections.max.idle.ms).", at_least=0),
    _key("sasl.server.max.receive.size", INT, 524288, "Largest request accepted before a "
         "SASL connection is authenticated.", at_least=1),
    # ACLs (oncelog.security.acl): empty authorizer.class.name = no authorizer, as Kafka.
    _key("authorizer.class.name", T, "", "The authorizer: empty for none (everything is "
         "allowed), or org.apache.kafka.metadata.authorizer.StandardAuthorizer for ACLs.",
         validator=_authorizer_class),
    _key("super.users", T, None, "Principals allowed everything by the authorizer, "
         "separated by semicolons (User:admin;User:broker)."),
    _key("allow.everyone.if.no.acl.found", B, False, "With an authorizer: whether a "
         "resource without any ACL is open to everyone."),
    _key("queued.max.requests", INT, 500, "Requests handled at once over all connections.",
         at_least=1),
    _key("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets.",
         at_least=1),
    _key("offsets.topic.replication.factor", S, 3, "Replication of __consumer_offsets "
         "(1 on one node).", at_least=1),
    _key("offsets.topic.segment.bytes", INT, 104857600, "segment.bytes of "
         "__consumer_offsets.", at_least=1),
    _key("offsets.commit.timeout.ms", INT, 5000, "How long an offset commit waits for the "
         "in-sync replicas of its __consumer_offsets partition (cluster mode).", at_least=1),
    _key("offsets.retention.minutes", INT, 10080, "Keep the offsets of an empty group this "
         "long.", at_least=1),
    _key("offset.metadata.max.bytes", INT, 4096, "Largest metadata string of a commit."),
    _key("group.initial.rebalance.delay.ms", INT, 3000, "Wait for more members before the "
         "first rebalance of a group."),
    _key("group.min.session.timeout.ms", INT, 6000, "Smallest session timeout allowed."),
    _key("group.max.session.timeout.ms", INT, 1800000, "Largest session timeout allowed."),
    _key("group.max.size", INT, INT_MAX, "Most members a group may have.", at_least=1),
    _key("producer.id.expiration.ms", INT, 86400000, "Forget a producer id idle this long.",
         at_least=1),
    _key("producer.id.expiration.check.interval.ms", INT, 600000, "How often idle producer "
         "ids are expired.", at_least=1),
    _key("transaction.state.log.num.partitions", INT, 50, "Partitions of "
         "__transaction_state.", at_least=1),
    _key("transaction.state.log.segment.bytes", INT, 104857600, "segment.bytes of "
         "__transaction_state.", at_least=1),
    _key("transaction.max.timeout.ms", INT, 900000, "Largest transaction timeout a producer "
         "may ask for.", at_least=1),
    _key("transactional.id.expiration.ms", INT, 604800000, "Forget a transactional id idle "
         "this long.", at_least=1),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, "How "
         "often timed-out transactions are aborted.", at_least=1),
    _key("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000, "How "
         "often expired transactional ids are removed.", at_least=1),
    _key("transaction.partition.verification.enable", B, True, "A transaction's first "
         "append to a partition must present the verification guard taken before its "
         "coordinator was asked (KIP-890); refused with INVALID_TXN_STATE if a marker "
         "came between."),
    _key("transaction.two.phase.commit.enable", B, False, "Allow two-phase-commit "
         "transactions (KIP-939)."),
    _key("transaction.version", INT, 2, "The transaction.version feature level this broker "
         "finalizes and advertises in ApiVersions (a finalized feature in Kafka, set with "
         "kafka-features.sh): 2 is transactions v2 (KIP-890 part 2: Produce v12 adds "
         "partitions implicitly, the epoch is bumped for every transaction), 1 or 0 keep "
         "clients on transactions v1 (AddPartitionsToTxn).", at_least=0, at_most=2),
    # The cluster's controller (oncelog.broker.cluster.controller; cluster mode only).
    _key("transaction.state.log.replication.factor", S, 3, "Replication of "
         "__transaction_state (1 on one node); the controller creates it once this many "
         "brokers are alive.", at_least=1),
    _key("transaction.state.log.min.isr", INT, 2, "min.insync.replicas of "
         "__transaction_state: the in-sync replicas a transaction log write (acks=-1) "
         "needs.", at_least=1),
    _key("auto.leader.rebalance.enable", B, True, "Let the controller move leadership back "
         "to each partition's preferred (first) replica when a broker's share of partitions "
         "it prefers but does not lead exceeds leader.imbalance.per.broker.percentage."),
    _key("leader.imbalance.check.interval.seconds", L, 300, "How often the controller checks "
         "the preferred-leader imbalance.", at_least=1),
    _key("leader.imbalance.per.broker.percentage", INT, 10, "Share (in percent) of the "
         "partitions a broker prefers but does not lead above which the controller moves "
         "them back to it.", at_least=0),
    # Cluster mode: the metadata store (etcd) and this broker's session in it.
    _key("metadata.etcd.endpoints", LS, "", "etcd endpoints (HOST:PORT, comma-separated) "
         "holding the cluster metadata; empty: a single node with no external service."),
    _key("metadata.etcd.prefix", T, "/oncelog", "etcd key prefix of this cluster's "
         "metadata (several clusters may share one etcd)."),
    _key("broker.session.timeout.ms", INT, 9000, "A broker whose metadata-store lease is not "
         "renewed for this long is considered gone (etcd lease TTL, whole seconds).",
         at_least=1),
    _key("broker.heartbeat.interval.ms", INT, 2000, "How often a broker renews its "
         "metadata-store lease.", at_least=1),
    _key("controlled.shutdown.enable", B, True, "On SIGTERM, ask the controller to move this "
         "broker's leaderships away before stopping (cluster mode)."),
    _key("controlled.shutdown.max.retries", INT, 3, "Attempts of a controlled shutdown "
         "before the broker stops anyway.", at_least=1),
    _key("controlled.shutdown.retry.backoff.ms", L, 5000, "How long one controlled-shutdown "
         "attempt waits for the leaderships to move.", at_least=0),
    # Replication (oncelog.broker.cluster.replica_fetcher / replica_manager; cluster mode).
    _key("replica.lag.time.max.ms", L, 30000, "A follower that has not caught up with the "
         "leader's log end for this long leaves the ISR.", at_least=0),
    _key("replica.high.watermark.checkpoint.interval.ms", L, 5000, "How often the high "
         "watermarks are written to each log directory's replication-offset-checkpoint "
         "(also at a clean shutdown); a restarted replica starts from them.", at_least=1),
    _key("replica.fetch.wait.max.ms", INT, 500, "Longest a follower's fetch waits at the "
         "leader for data.", at_least=0),
    _key("replica.fetch.max.bytes", INT, 1048576, "Bytes a follower's fetch asks for per "
         "partition (the first batch is returned whole even if larger).", at_least=0),
    _key("replica.fetch.response.max.bytes", INT, 10485760, "Bytes a follower's fetch asks "
         "for in all.", at_least=0),
    _key("replica.fetch.min.bytes", INT, 1, "Bytes a follower's fetch waits for at the "
         "leader.", at_least=1),
    _key("replica.fetch.backoff.ms", INT, 1000, "Pause of a follower's fetcher after an "
         "error.", at_least=0),
    _key("replica.socket.timeout.ms", INT, 30000, "Time a follower waits for the leader's "
         "answer beyond replica.fetch.wait.max.ms.", at_least=1),
    _key("num.replica.fetchers", INT, 1, "Fetcher tasks per source broker.", at_least=1),
]


def _broker_synonym(topic_key: ConfigKey, broker_name: str) -> ConfigKey:
    """The broker default of a topic config: same type and validation, changeable at
    runtime cluster-wide (Kafka's log configs are)."""
    return replace(
        topic_key, name=broker_name, synonyms=(), dynamic=CW,
        doc=f"Default {topic_key.name} of topics that do not set it.",
    )


def _broker_keys() -> dict[str, ConfigKey]:
    keys = {k.name: k for k in _BROKER_KEYS}
    for topic_key in _TOPIC_KEYS:
        if topic_key.synonyms and topic_key.synonyms[0] not in keys:
            keys[topic_key.synonyms[0]] = _broker_synonym(topic_key, topic_key.synonyms[0])
    return dict(sorted(keys.items()))


BROKER_KEYS: dict[str, ConfigKey] = _broker_keys()


LISTENER_PREFIX = "listener.name."
LISTENER_OVERRIDABLE = ("ssl.", "sasl.enabled.mechanisms")
"""Broker configs a listener may override as ``listener.name.<listener>.<config>``
(Kafka's per-listener security configs; the SASL helper adds its own prefixes)."""


def broker_key(name: str) -> ConfigKey | None:
    """The key of a broker config name: a registered one, or a per-listener override
    ``listener.name.<lowercase listener>.<config>`` of an overridable config (Kafka's
    per-listener security settings), unset by default; None for an unknown name."""
    key = BROKER_KEYS.get(name)
    if key is not None or not name.startswith(LISTENER_PREFIX):
        return key
    listener, dot, base = name[len(LISTENER_PREFIX):].partition(".")
    base_key = BROKER_KEYS.get(base)
    if not listener or not dot or base_key is None or not base.startswith(LISTENER_OVERRIDABLE):
        return sasl_jaas_key(name)
    return replace(base_key, name=name, default=None,
                   doc=f"{base} of the {listener.upper()} listener.")


SASL_JAAS_SUFFIXES = tuple(f".{m}.sasl.jaas.config"
                           for m in ("plain", "scram-sha-256", "scram-sha-512"))


def sasl_jaas_key(name: str) -> ConfigKey | None:
    """``listener.name.<listener>.<mechanism lowercase>.sasl.jaas.config`` (Kafka's
    per-listener JAAS line: PLAIN users as ``user_<name>="..."``, and the credentials this
    broker logs in with on its inter-broker listener); a sensitive password config."""
    if not name.startswith("listener.name.") or not name.endswith(SASL_JAAS_SUFFIXES):
        return None
    return ConfigKey(name, ConfigType.PASSWORD, None, "JAAS login module line of a SASL "
                     "mechanism on a listener.", sensitive=True)
