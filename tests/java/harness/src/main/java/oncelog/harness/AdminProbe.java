package oncelog.harness;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Runs a list of Java AdminClient (kafka-clients 4.4) operations against one broker and
 * prints their results as JSON.
 *
 * <pre>java -cp HARNESS_CLASSPATH oncelog.harness.AdminProbe BOOTSTRAP &lt; operations.json</pre>
 *
 * stdin: a JSON list of objects {"op": NAME, ...arguments}; the operations and their
 * arguments (partitions are [topic, index], replicas [topic, index, broker]):
 * <ul>
 * <li>describeCluster {"authorizedOperations": bool}</li>
 * <li>describeTopics {"topics": [name...]} (DescribeTopicPartitions on Kafka 4.x brokers)</li>
 * <li>createTopics {"topics": [{"name", "partitions"?, "replicationFactor"?,
 *     "assignments"?: {"0": [1]}, "configs"?: {k: v}}]}</li>
 * <li>createPartitions {"topics": {name: {"count": n, "assignments"?: [[1], ...]}}}</li>
 * <li>electLeaders {"type": "PREFERRED"|"UNCLEAN", "partitions": [[t, p]...] or null}</li>
 * <li>describeLogDirs {"brokers": [id...]}</li>
 * <li>describeReplicaLogDirs {"replicas": [[t, p, broker]...]}</li>
 * <li>alterReplicaLogDirs {"moves": [{"topic", "partition", "broker", "dir"}]}</li>
 * <li>listPartitionReassignments {}</li>
 * <li>alterPartitionReassignments {"reassignments": [{"topic", "partition",
 *     "replicas": [ids] or null (cancel)}]}</li>
 * <li>deleteRecords {"records": [{"topic", "partition", "offset"}]}</li>
 * <li>describeConfigs {"resources": [{"type": "TOPIC"|"BROKER", "name"}]}</li>
 * <li>incrementalAlterConfigs {"resources": [{"type", "name", "ops": [{"name", "value",
 *     "op": "SET"|"DELETE"|"APPEND"|"SUBTRACT"}]}]}</li>
 * <li>listTransactions {"states"?: [name...], "producerIds"?: [id...], "durationMs"?: n,
 *     "pattern"?: regex}</li>
 * <li>describeTransactions {"ids": [transactional id...]}</li>
 * <li>describeProducers {"partitions": [[t, p]...]}</li>
 * <li>abortTransaction {"topic", "partition", "producerId", "producerEpoch",
 *     "coordinatorEpoch"}</li>
 * <li>fenceProducers {"ids": [transactional id...]}</li>
 * <li>forceTerminateTransaction {"id"} (KIP-939's Admin.forceTerminateTransaction)</li>
 * </ul>
 * stdout: one JSON list with one {"op", "ok": true, "result"} or {"op", "ok": false,
 * "error": {"class", "message"}} per operation. Where an operation answers per key (topic,
 * partition, replica, resource), the result maps each key to {"ok": true, ...} or
 * {"ok": false, "error": ...}, so one refused key does not hide the others.
 * Exit code 0 when every operation ran, whatever its outcome; 2 on bad input.
 */
public final class AdminProbe {
    private static final long TIMEOUT_S = 30;

    private AdminProbe() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: AdminProbe BOOTSTRAP < operations.json");
            System.exit(2);
        }
        Object input;
        try {
            input = Json.parse(new String(System.in.readAllBytes(), StandardCharsets.UTF_8));
        } catch (IOException | IllegalArgumentException e) {
            System.err.println("AdminProbe: stdin is not JSON: " + e.getMessage());
            System.exit(2);
            return;
        }
        if (!(input instanceof List<?> operations)) {
            System.err.println("AdminProbe: stdin must be a JSON list of operations");
            System.exit(2);
            return;
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        List<Object> results = new ArrayList<>();
        try (Admin admin = Admin.create(props)) {
            for (Object item : operations) {
                Map<?, ?> op = (Map<?, ?>) item;
                String name = String.valueOf(op.get("op"));
                Map<String, Object> outcome = new LinkedHashMap<>();
                outcome.put("op", name);
                try {
                    Object result = run(admin, name, op);
                    outcome.put("ok", true);
                    outcome.put("result", result);
                } catch (Exception e) {
                    outcome.put("ok", false);
                    outcome.put("error", error(e));
                }
                results.add(outcome);
            }
        }
        System.out.println(Json.write(results));
    }

    private static Object run(Admin admin, String name, Map<?, ?> op) throws Exception {
        return switch (name) {
            case "describeCluster" -> describeCluster(admin, op);
            case "describeTopics" -> perKey(admin.describeTopics(strings(op.get("topics")))
                .topicNameValues(), AdminProbe::topic);
            case "createTopics" -> perKey(admin.createTopics(newTopics(op)).values(), v -> null);
            case "createPartitions" -> perKey(admin.createPartitions(newPartitions(op)).values(),
                v -> null);
            case "electLeaders" -> electLeaders(admin, op);
            case "describeLogDirs" -> describeLogDirs(admin, op);
            case "describeReplicaLogDirs" -> describeReplicaLogDirs(admin, op);
            case "alterReplicaLogDirs" -> alterReplicaLogDirs(admin, op);
            case "listPartitionReassignments" -> listPartitionReassignments(admin);
            case "alterPartitionReassignments" -> alterPartitionReassignments(admin, op);
            case "deleteRecords" -> deleteRecords(admin, op);
            case "describeConfigs" -> describeConfigs(admin, op);
            case "incrementalAlterConfigs" -> incrementalAlterConfigs(admin, op);
            case "listTransactions" -> TxnAdmin.listTransactions(admin, op);
            case "describeTransactions" -> TxnAdmin.describeTransactions(admin, op);
            case "describeProducers" -> TxnAdmin.describeProducers(admin, op);
            case "abortTransaction" -> TxnAdmin.abortTransaction(admin, op);
            case "fenceProducers" -> TxnAdmin.fenceProducers(admin, op);
            case "forceTerminateTransaction" -> TxnAdmin.forceTerminateTransaction(admin, op);
            default -> throw new IllegalArgumentException("unknown operation " + name);
        };
    }

    // -- results -----------------------------------------------------------------------------

    interface Render<T> {
        Object apply(T value) throws Exception;
    }

    static <T> T get(KafkaFuture<T> future) throws Exception {
        try {
            return future.get(TIMEOUT_S, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
    }

    static <K, T> Map<String, Object> perKey(Map<K, KafkaFuture<T>> futures,
                                                     Render<T> render) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<K, KafkaFuture<T>> entry : futures.entrySet()) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                T value = get(entry.getValue());
                one.put("ok", true);
                one.put("value", render.apply(value));
            } catch (Exception e) {
                one.put("ok", false);
                one.put("error", error(e));
            }
            out.put(key(entry.getKey()), one);
        }
        return out;
    }

    private static String key(Object key) {
        if (key instanceof TopicPartitionReplica r) {
            return r.topic() + "-" + r.partition() + "@" + r.brokerId();
        }
        if (key instanceof ConfigResource r) {
            return r.type() + ":" + r.name();
        }
        return String.valueOf(key);
    }

    private static Map<String, Object> error(Throwable e) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("class", e.getClass().getSimpleName());
        out.put("message", e.getMessage());
        return out;
    }

    private static Object node(Node node) {
        if (node == null || node.isEmpty()) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", node.id());
        out.put("host", node.host());
        out.put("port", node.port());
        out.put("rack", node.rack());
        return out;
    }

    private static List<Object> ids(Collection<Node> nodes) {
        List<Object> out = new ArrayList<>();
        for (Node n : nodes) {
            out.add(n.id());
        }
        return out;
    }

    // -- arguments ---------------------------------------------------------------------------

    static List<String> strings(Object value) {
        List<String> out = new ArrayList<>();
        for (Object o : (List<?>) value) {
            out.add(String.valueOf(o));
        }
        return out;
    }

    private static List<Integer> ints(Object value) {
        List<Integer> out = new ArrayList<>();
        for (Object o : (List<?>) value) {
            out.add(((Number) o).intValue());
        }
        return out;
    }

    static int integer(Map<?, ?> map, String key) {
        return ((Number) map.get(key)).intValue();
    }

    static TopicPartition partition(Object value) {
        List<?> pair = (List<?>) value;
        return new TopicPartition(String.valueOf(pair.get(0)), ((Number) pair.get(1)).intValue());
    }

    private static ConfigResource resource(Map<?, ?> map) {
        return new ConfigResource(ConfigResource.Type.valueOf(String.valueOf(map.get("type"))),
            String.valueOf(map.get("name")));
    }

    // -- operations --------------------------------------------------------------------------

    private static Object describeCluster(Admin admin, Map<?, ?> op) throws Exception {
        boolean operations = Boolean.TRUE.equals(op.get("authorizedOperations"));
        DescribeClusterResult result = admin.describeCluster(
            new DescribeClusterOptions().includeAuthorizedOperations(operations));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("clusterId", get(result.clusterId()));
        out.put("controller", node(get(result.controller())));
        List<Object> nodes = new ArrayList<>();
        for (Node n : get(result.nodes())) {
            nodes.add(node(n));
        }
        out.put("nodes", nodes);
        Set<AclOperation> allowed = get(result.authorizedOperations());
        List<String> names = new ArrayList<>();
        if (allowed != null) {
            for (AclOperation a : allowed) {
                names.add(a.name());
            }
            names.sort(null);
        }
        out.put("authorizedOperations", allowed == null ? null : names);
        return out;
    }

    private static Object topic(TopicDescription description) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("name", description.name());
        out.put("internal", description.isInternal());
        out.put("topicId", String.valueOf(description.topicId()));
        List<Object> partitions = new ArrayList<>();
        for (TopicPartitionInfo info : description.partitions()) {
            Map<String, Object> p = new LinkedHashMap<>();
            p.put("partition", info.partition());
            p.put("leader", info.leader() == null ? null : info.leader().id());
            p.put("replicas", ids(info.replicas()));
            p.put("isr", ids(info.isr()));
            p.put("elr", ids(info.elr()));
            p.put("lastKnownElr", ids(info.lastKnownElr()));
            partitions.add(p);
        }
        out.put("partitions", partitions);
        return out;
    }

    private static List<NewTopic> newTopics(Map<?, ?> op) {
        List<NewTopic> topics = new ArrayList<>();
        for (Object item : (List<?>) op.get("topics")) {
            Map<?, ?> t = (Map<?, ?>) item;
            String name = String.valueOf(t.get("name"));
            NewTopic topic;
            if (t.get("assignments") instanceof Map<?, ?> assignments) {
                Map<Integer, List<Integer>> replicas = new LinkedHashMap<>();
                for (Map.Entry<?, ?> e : assignments.entrySet()) {
                    replicas.put(Integer.valueOf(String.valueOf(e.getKey())), ints(e.getValue()));
                }
                topic = new NewTopic(name, replicas);
            } else {
                Optional<Integer> count = t.get("partitions") == null ? Optional.empty()
                    : Optional.of(integer(t, "partitions"));
                Optional<Short> factor = t.get("replicationFactor") == null ? Optional.empty()
                    : Optional.of((short) integer(t, "replicationFactor"));
                topic = new NewTopic(name, count, factor);
            }
            if (t.get("configs") instanceof Map<?, ?> configs) {
                Map<String, String> values = new LinkedHashMap<>();
                configs.forEach((k, v) -> values.put(String.valueOf(k), String.valueOf(v)));
                topic.configs(values);
            }
            topics.add(topic);
        }
        return topics;
    }

    private static Map<String, NewPartitions> newPartitions(Map<?, ?> op) {
        Map<String, NewPartitions> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) op.get("topics")).entrySet()) {
            Map<?, ?> spec = (Map<?, ?>) e.getValue();
            int count = integer(spec, "count");
            NewPartitions partitions;
            if (spec.get("assignments") instanceof List<?> assignments) {
                List<List<Integer>> replicas = new ArrayList<>();
                for (Object r : assignments) {
                    replicas.add(ints(r));
                }
                partitions = NewPartitions.increaseTo(count, replicas);
            } else {
                partitions = NewPartitions.increaseTo(count);
            }
            out.put(String.valueOf(e.getKey()), partitions);
        }
        return out;
    }

    private static Object electLeaders(Admin admin, Map<?, ?> op) throws Exception {
        ElectionType type = ElectionType.valueOf(String.valueOf(op.get("type")));
        Set<TopicPartition> partitions = null;
        if (op.get("partitions") != null) {
            partitions = new HashSet<>();
            for (Object p : (List<?>) op.get("partitions")) {
                partitions.add(partition(p));
            }
        }
        Map<TopicPartition, Optional<Throwable>> result =
            get(admin.electLeaders(type, partitions).partitions());
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<TopicPartition, Optional<Throwable>> e : result.entrySet()) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("ok", e.getValue().isEmpty());
            e.getValue().ifPresent(t -> one.put("error", error(t)));
            out.put(e.getKey().toString(), one);
        }
        return out;
    }

    private static Object describeLogDirs(Admin admin, Map<?, ?> op) throws Exception {
        Map<Integer, Map<String, LogDirDescription>> all =
            get(admin.describeLogDirs(ints(op.get("brokers"))).allDescriptions());
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<Integer, Map<String, LogDirDescription>> broker : all.entrySet()) {
            Map<String, Object> dirs = new LinkedHashMap<>();
            for (Map.Entry<String, LogDirDescription> dir : broker.getValue().entrySet()) {
                LogDirDescription d = dir.getValue();
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("error", d.error() == null ? null : error(d.error()));
                one.put("totalBytes", d.totalBytes().isPresent() ? d.totalBytes().getAsLong() : null);
                one.put("usableBytes",
                    d.usableBytes().isPresent() ? d.usableBytes().getAsLong() : null);
                Map<String, Object> replicas = new LinkedHashMap<>();
                for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                    Map<String, Object> info = new LinkedHashMap<>();
                    info.put("size", r.getValue().size());
                    info.put("offsetLag", r.getValue().offsetLag());
                    info.put("isFuture", r.getValue().isFuture());
                    replicas.put(r.getKey().toString(), info);
                }
                one.put("replicas", replicas);
                dirs.put(dir.getKey(), one);
            }
            out.put(String.valueOf(broker.getKey()), dirs);
        }
        return out;
    }

    private static Object describeReplicaLogDirs(Admin admin, Map<?, ?> op) {
        List<TopicPartitionReplica> replicas = new ArrayList<>();
        for (Object r : (List<?>) op.get("replicas")) {
            List<?> triple = (List<?>) r;
            replicas.add(new TopicPartitionReplica(String.valueOf(triple.get(0)),
                ((Number) triple.get(1)).intValue(), ((Number) triple.get(2)).intValue()));
        }
        return perKey(admin.describeReplicaLogDirs(replicas).values(), (ReplicaLogDirInfo info) -> {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("currentDir", info.getCurrentReplicaLogDir());
            one.put("currentOffsetLag", info.getCurrentReplicaOffsetLag());
            one.put("futureDir", info.getFutureReplicaLogDir());
            one.put("futureOffsetLag", info.getFutureReplicaOffsetLag());
            return one;
        });
    }

    private static Object alterReplicaLogDirs(Admin admin, Map<?, ?> op) {
        Map<TopicPartitionReplica, String> moves = new LinkedHashMap<>();
        for (Object m : (List<?>) op.get("moves")) {
            Map<?, ?> move = (Map<?, ?>) m;
            moves.put(new TopicPartitionReplica(String.valueOf(move.get("topic")),
                integer(move, "partition"), integer(move, "broker")),
                String.valueOf(move.get("dir")));
        }
        return perKey(admin.alterReplicaLogDirs(moves).values(), v -> null);
    }

    private static Object listPartitionReassignments(Admin admin) throws Exception {
        Map<TopicPartition, PartitionReassignment> all =
            get(admin.listPartitionReassignments().reassignments());
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<TopicPartition, PartitionReassignment> e : all.entrySet()) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("replicas", e.getValue().replicas());
            one.put("adding", e.getValue().addingReplicas());
            one.put("removing", e.getValue().removingReplicas());
            out.put(e.getKey().toString(), one);
        }
        return out;
    }

    private static Object alterPartitionReassignments(Admin admin, Map<?, ?> op) {
        Map<TopicPartition, Optional<NewPartitionReassignment>> wanted = new LinkedHashMap<>();
        for (Object r : (List<?>) op.get("reassignments")) {
            Map<?, ?> spec = (Map<?, ?>) r;
            TopicPartition tp = new TopicPartition(String.valueOf(spec.get("topic")),
                integer(spec, "partition"));
            wanted.put(tp, spec.get("replicas") == null ? Optional.empty()
                : Optional.of(new NewPartitionReassignment(ints(spec.get("replicas")))));
        }
        return perKey(admin.alterPartitionReassignments(wanted).values(), v -> null);
    }

    private static Object deleteRecords(Admin admin, Map<?, ?> op) {
        Map<TopicPartition, RecordsToDelete> wanted = new LinkedHashMap<>();
        for (Object r : (List<?>) op.get("records")) {
            Map<?, ?> spec = (Map<?, ?>) r;
            wanted.put(new TopicPartition(String.valueOf(spec.get("topic")),
                integer(spec, "partition")),
                RecordsToDelete.beforeOffset(((Number) spec.get("offset")).longValue()));
        }
        return perKey(admin.deleteRecords(wanted).lowWatermarks(), d -> d.lowWatermark());
    }

    private static Object describeConfigs(Admin admin, Map<?, ?> op) {
        List<ConfigResource> resources = new ArrayList<>();
        for (Object r : (List<?>) op.get("resources")) {
            resources.add(resource((Map<?, ?>) r));
        }
        DescribeConfigsOptions options = new DescribeConfigsOptions()
            .includeSynonyms(Boolean.TRUE.equals(op.get("synonyms")))
            .includeDocumentation(Boolean.TRUE.equals(op.get("documentation")));
        return perKey(admin.describeConfigs(resources, options).values(), (Config config) -> {
            Map<String, Object> entries = new LinkedHashMap<>();
            for (ConfigEntry entry : config.entries()) {
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("value", entry.value());
                one.put("source", entry.source().name());
                one.put("type", entry.type().name());
                one.put("readOnly", entry.isReadOnly());
                one.put("sensitive", entry.isSensitive());
                List<Object> synonyms = new ArrayList<>();
                for (ConfigEntry.ConfigSynonym s : entry.synonyms()) {
                    synonyms.add(List.of(s.name(), String.valueOf(s.value()), s.source().name()));
                }
                one.put("synonyms", synonyms);
                one.put("documentation", entry.documentation());
                entries.put(entry.name(), one);
            }
            return entries;
        });
    }

    private static Object incrementalAlterConfigs(Admin admin, Map<?, ?> op) {
        Map<ConfigResource, Collection<AlterConfigOp>> wanted = new LinkedHashMap<>();
        for (Object r : (List<?>) op.get("resources")) {
            Map<?, ?> spec = (Map<?, ?>) r;
            List<AlterConfigOp> ops = new ArrayList<>();
            for (Object o : (List<?>) spec.get("ops")) {
                Map<?, ?> one = (Map<?, ?>) o;
                ops.add(new AlterConfigOp(
                    new ConfigEntry(String.valueOf(one.get("name")),
                        one.get("value") == null ? null : String.valueOf(one.get("value"))),
                    AlterConfigOp.OpType.valueOf(String.valueOf(one.get("op")))));
            }
            wanted.put(resource(spec), ops);
        }
        return perKey(admin.incrementalAlterConfigs(wanted).values(), v -> null);
    }
}
