package oncelog.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Reader;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.PreparedTxnState;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.producer.internals.TransactionManager;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Exactly-once scenarios driven by the Java client (kafka-clients 4.4), one per mode.
 *
 * <pre>java -cp HARNESS_CLASSPATH oncelog.harness.TxnClient MODE BOOTSTRAP [CLIENT.PROPERTIES] &lt; spec.json</pre>
 *
 * CLIENT.PROPERTIES: client configs (security.protocol, sasl.*, ssl.*, ...) given to every
 * producer and consumer of the mode, after the mode's own settings.
 * stdin's first line is one JSON object (the mode's arguments); stdout is one JSON object per line, each
 * printed (and flushed) as soon as it is known, the last one {"done": true, ...}. Modes:
 * <ul>
 * <li>idempotent {"records": [{"i", "topic", "partition", "key", "kseq", "value"}]}: an
 *     idempotent producer (acks=all) sends them in order with headers i and kseq; one line
 *     {"ack": i, "topic", "partition", "offset"} or {"error": i, "class", "message"} each.</li>
 * <li>transactions {"transactionalId", "transactions": [{"records": [[topic, partition,
 *     value]...], "end": "commit"|"abort"}]}: one producer runs each transaction in turn;
 *     {"transaction": n, "end", "offsets": [...]} each, and {"tv2": bool} after init.</li>
 * <li>consume {"topics", "isolation": "read_committed"|"read_uncommitted"}: reads every
 *     partition of the topics from the beginning to its end offset (LSO for
 *     read_committed); one {"records": [[topic, partition, offset, value]...]}.</li>
 * <li>ctp {"input", "output", "group", "transactionalId"}: consume-transform-produce with
 *     sendOffsetsToTransaction(offsets, consumer.groupMetadata()) (KIP-447): instance A reads
 *     the input and sends its transform in a transaction; instance B joins the same group,
 *     which evicts A; A's offsets with its old generation must be refused; A aborts, B does
 *     the whole input in one transaction and commits.</li>
 * <li>fence {"transactionalId", "topic"}: two producers with the same transactional.id;
 *     the first one's commit after the second's initTransactions must be fenced.</li>
 * <li>open {"transactionalId", "twoPhaseCommit": bool, "records": [[topic, partition,
 *     value]...]}: init, begin, send, print {"open": id}, then wait (for a SIGKILL) until
 *     stdin's next line or its end.</li>
 * <li>states {"states": [text...]}: Kafka's PreparedTxnState(String) of each text, with
 *     its toString, producerId, epoch and hasTransaction, or the exception's class.</li>
 * </ul>
 * KIP-939 in kafka-clients 4.4.0: PreparedTxnState and the producer config
 * transaction.two.phase.commit.enable exist, but KafkaProducer has no
 * initTransactions(boolean), prepareTransaction() or completeTransaction(), and InitProducerId
 * v6 (enable2Pc, keepPreparedTxn) is marked latestVersionUnstable, so the client sends v5
 * without them: it cannot open or recover a two-phase-commit transaction on any broker.
 * Exit code 0 when the mode ran (outcomes are in the output), 1 on an unexpected error.
 */
public final class TxnClient {
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long DEADLINE_MS = 60_000;
    private static final BufferedReader STDIN =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private TxnClient() {}

    /** Client configs of the optional third argument (a properties file, e.g.
     * security.protocol, sasl.*, ssl.*), applied to every producer and consumer. */
    private static final Properties CLIENT_CONFIG = new Properties();

    public static void main(String[] args) throws Exception {
        if (args.length != 2 && args.length != 3) {
            System.err.println("usage: TxnClient MODE BOOTSTRAP [CLIENT.PROPERTIES] < spec.json");
            System.exit(2);
        }
        if (args.length == 3) {
            try (Reader reader = Files.newBufferedReader(Path.of(args[2]))) {
                CLIENT_CONFIG.load(reader);
            }
        }
        Map<?, ?> spec = (Map<?, ?>) Json.parse(STDIN.readLine());
        String bootstrap = args[1];
        switch (args[0]) {
            case "idempotent" -> idempotent(bootstrap, spec);
            case "transactions" -> transactions(bootstrap, spec);
            case "consume" -> consume(bootstrap, spec);
            case "ctp" -> consumeTransformProduce(bootstrap, spec);
            case "fence" -> fence(bootstrap, spec);
            case "open" -> open(bootstrap, spec);
            case "states" -> states(spec);
            default -> {
                System.err.println("TxnClient: unknown mode " + args[0]);
                System.exit(2);
            }
        }
        System.exit(0);
    }

    // -- output ------------------------------------------------------------------------------

    static void emit(Object... pairs) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            out.put(String.valueOf(pairs[i]), pairs[i + 1]);
        }
        System.out.println(Json.write(out));
        System.out.flush();
    }

    static Throwable cause(Throwable e) {
        return e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
    }

    // -- clients -----------------------------------------------------------------------------

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId,
                                                  boolean twoPhase) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "4096");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        if (transactionalId != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        if (twoPhase) {
            props.put(ProducerConfig.TRANSACTION_TWO_PHASE_COMMIT_ENABLE_CONFIG, "true");
        }
        props.putAll(CLIENT_CONFIG);
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group,
                                                  String isolation, Map<String, String> extra) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        props.putAll(CLIENT_CONFIG);
        props.putAll(extra);
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    static List<Object> sendAll(KafkaProducer<String, String> producer, Object records)
            throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (Object r : (List<?>) records) {
            List<?> rec = (List<?>) r;
            futures.add(producer.send(new ProducerRecord<>(String.valueOf(rec.get(0)),
                ((Number) rec.get(1)).intValue(), null, String.valueOf(rec.get(2)))));
        }
        List<Object> offsets = new ArrayList<>();
        for (Future<RecordMetadata> f : futures) {
            offsets.add(f.get(60, TimeUnit.SECONDS).offset());
        }
        return offsets;
    }

    /** Whether the producer runs transactions v2 (KIP-890 part 2): kafka-clients decides
     * from the broker's finalized transaction.version feature; not in its public API. */
    static Object transactionManagerTv2(KafkaProducer<?, ?> producer) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        return ((TransactionManager) f.get(producer)).isTransactionV2Enabled();
    }

    // -- modes -------------------------------------------------------------------------------

    static void idempotent(String bootstrap, Map<?, ?> spec) throws Exception {
        List<?> records = (List<?>) spec.get("records");
        try (KafkaProducer<String, String> producer = producer(bootstrap, null, false)) {
            for (Object r : records) {
                Map<?, ?> rec = (Map<?, ?>) r;
                long index = ((Number) rec.get("i")).longValue();
                ProducerRecord<String, String> record = new ProducerRecord<>(
                    String.valueOf(rec.get("topic")), ((Number) rec.get("partition")).intValue(),
                    String.valueOf(rec.get("key")), String.valueOf(rec.get("value")));
                record.headers().add("i", String.valueOf(index).getBytes(StandardCharsets.UTF_8));
                record.headers().add("kseq",
                    String.valueOf(rec.get("kseq")).getBytes(StandardCharsets.UTF_8));
                producer.send(record, (meta, error) -> {
                    if (error != null) {
                        emit("error", index, "class", error.getClass().getSimpleName(),
                            "message", error.getMessage());
                    } else {
                        emit("ack", index, "topic", meta.topic(), "partition", meta.partition(),
                            "offset", meta.offset());
                    }
                });
            }
            producer.flush();
        }
        emit("done", true);
    }

    static void transactions(String bootstrap, Map<?, ?> spec) throws Exception {
        String txnId = String.valueOf(spec.get("transactionalId"));
        try (KafkaProducer<String, String> producer = producer(bootstrap, txnId, false)) {
            producer.initTransactions();
            emit("tv2", transactionManagerTv2(producer));
            int n = 0;
            for (Object t : (List<?>) spec.get("transactions")) {
                Map<?, ?> txn = (Map<?, ?>) t;
                producer.beginTransaction();
                List<Object> offsets = sendAll(producer, txn.get("records"));
                String end = String.valueOf(txn.get("end"));
                if (end.equals("commit")) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                emit("transaction", n++, "end", end, "offsets", offsets,
                    "tv2", transactionManagerTv2(producer));
            }
        }
        emit("done", true);
    }

    static void consume(String bootstrap, Map<?, ?> spec) {
        String isolation = String.valueOf(spec.get("isolation"));
        List<Object> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, null, isolation,
                Map.of())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (Object topic : (List<?>) spec.get("topics")) {
                for (PartitionInfo p : consumer.partitionsFor(String.valueOf(topic))) {
                    tps.add(new TopicPartition(p.topic(), p.partition()));
                }
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (!reached(consumer, ends) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(POLL)) {
                    out.add(List.of(r.topic(), r.partition(), r.offset(), r.value()));
                }
            }
            emit("records", out, "ends", positions(ends));
        }
        emit("done", true);
    }

    static boolean reached(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    static Map<String, Object> positions(Map<TopicPartition, Long> offsets) {
        Map<String, Object> out = new LinkedHashMap<>();
        offsets.forEach((tp, offset) -> out.put(tp.toString(), offset));
        return out;
    }

    /** Polls until the consumer has an assignment and has read every record up to the
     * input's end offsets (from its committed position); returns them. */
    static List<ConsumerRecord<String, String>> readAssigned(KafkaConsumer<String, String> c,
                                                             String input) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        Map<TopicPartition, Long> ends = null;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(POLL)) {
                out.add(r);
            }
            Set<TopicPartition> assigned = c.assignment();
            if (assigned.isEmpty()) {
                continue;
            }
            if (ends == null) {
                ends = c.endOffsets(assigned);
            }
            if (reached(c, ends)) {
                return out;
            }
        }
        throw new IllegalStateException("no assignment or records of " + input + " within "
            + DEADLINE_MS + " ms");
    }

    static Map<TopicPartition, OffsetAndMetadata> nextOffsets(
            KafkaConsumer<String, String> consumer) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            out.put(tp, new OffsetAndMetadata(consumer.position(tp)));
        }
        return out;
    }

    static void transform(KafkaProducer<String, String> producer, String output,
                          List<ConsumerRecord<String, String>> records) throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (ConsumerRecord<String, String> r : records) {
            futures.add(producer.send(new ProducerRecord<>(output, r.partition(), r.key(),
                r.value().toUpperCase())));
        }
        for (Future<RecordMetadata> f : futures) {
            f.get(60, TimeUnit.SECONDS);
        }
    }

    static void consumeTransformProduce(String bootstrap, Map<?, ?> spec) throws Exception {
        String input = String.valueOf(spec.get("input"));
        String output = String.valueOf(spec.get("output"));
        String group = String.valueOf(spec.get("group"));
        String txnId = String.valueOf(spec.get("transactionalId"));
        // A short rebalance timeout: when B joins, the group waits this long for A (which
        // does not poll any more) and then goes on without it, in a new generation.
        Map<String, String> groupConfig = Map.of(
            ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "3000",
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000",
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        try (KafkaConsumer<String, String> consumerA = consumer(bootstrap, group,
                 "read_committed", groupConfig);
             KafkaProducer<String, String> producerA = producer(bootstrap, txnId + "-a", false);
             KafkaConsumer<String, String> consumerB = consumer(bootstrap, group,
                 "read_committed", groupConfig);
             KafkaProducer<String, String> producerB = producer(bootstrap, txnId + "-b",
                 false)) {
            producerA.initTransactions();
            producerB.initTransactions();
            consumerA.subscribe(List.of(input));
            List<ConsumerRecord<String, String>> readA = readAssigned(consumerA, input);
            ConsumerGroupMetadata staleA = consumerA.groupMetadata();
            emit("a", "read", "records", readA.size(), "generation", staleA.generationId(),
                "member", staleA.memberId());
            producerA.beginTransaction();
            transform(producerA, output, readA);
            Map<TopicPartition, OffsetAndMetadata> offsetsA = nextOffsets(consumerA);

            consumerB.subscribe(List.of(input));
            List<ConsumerRecord<String, String>> readB = readAssigned(consumerB, input);
            ConsumerGroupMetadata metaB = consumerB.groupMetadata();
            emit("b", "read", "records", readB.size(), "generation", metaB.generationId(),
                "member", metaB.memberId());

            String fencedA;
            try {
                producerA.sendOffsetsToTransaction(offsetsA, staleA);
                producerA.commitTransaction();
                fencedA = null;
            } catch (Exception e) {
                fencedA = cause(e).getClass().getSimpleName() + ": " + cause(e).getMessage();
                producerA.abortTransaction();
            }
            emit("a", "end", "fenced", fencedA);

            producerB.beginTransaction();
            transform(producerB, output, readB);
            producerB.sendOffsetsToTransaction(nextOffsets(consumerB), metaB);
            producerB.commitTransaction();
            emit("b", "committed", "offsets", positions(toLongs(nextOffsets(consumerB))));
        }
        emit("done", true);
    }

    static Map<TopicPartition, Long> toLongs(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<TopicPartition, Long> out = new HashMap<>();
        offsets.forEach((tp, o) -> out.put(tp, o.offset()));
        return out;
    }

    static void fence(String bootstrap, Map<?, ?> spec) throws Exception {
        String txnId = String.valueOf(spec.get("transactionalId"));
        String topic = String.valueOf(spec.get("topic"));
        try (KafkaProducer<String, String> first = producer(bootstrap, txnId, false);
             KafkaProducer<String, String> second = producer(bootstrap, txnId, false)) {
            first.initTransactions();
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, "zombie")).get(60, TimeUnit.SECONDS);
            second.initTransactions();
            String fenced = null;
            try {
                // EndTxn with the old epoch: the coordinator answers PRODUCER_FENCED.
                first.commitTransaction();
            } catch (Exception e) {
                fenced = cause(e).getClass().getName();
            }
            emit("first", "commit", "error", fenced);
            second.beginTransaction();
            second.send(new ProducerRecord<>(topic, 0, null, "winner")).get(60, TimeUnit.SECONDS);
            second.commitTransaction();
            emit("second", "committed");
        }
        emit("done", true);
    }

    static void open(String bootstrap, Map<?, ?> spec) throws Exception {
        String txnId = String.valueOf(spec.get("transactionalId"));
        KafkaProducer<String, String> producer = producer(bootstrap, txnId,
            Boolean.TRUE.equals(spec.get("twoPhaseCommit")));
        producer.initTransactions();
        producer.beginTransaction();
        List<Object> offsets = sendAll(producer, spec.get("records"));
        emit("open", txnId, "offsets", offsets);
        // Keep the transaction open until the test kills this process (or closes stdin).
        STDIN.readLine();
        emit("done", true);
    }

    static void states(Map<?, ?> spec) {
        List<Object> out = new ArrayList<>();
        for (Object text : (List<?>) spec.get("states")) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("input", text);
            try {
                PreparedTxnState state = new PreparedTxnState((String) text);
                one.put("string", state.toString());
                one.put("producerId", state.producerId());
                one.put("epoch", state.epoch());
                one.put("hasTransaction", state.hasTransaction());
            } catch (RuntimeException e) {
                one.put("error", e.getClass().getSimpleName());
            }
            out.add(one);
        }
        emit("states", out);
        emit("done", true);
    }
}
