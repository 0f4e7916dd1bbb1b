package oncelog.harness;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
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
import org.apache.kafka.clients.producer.internals.TransactionalRequestResult;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.internals.ProducerIdAndEpoch;

/**
 * Exactly-once scenarios driven by the Java client (kafka-clients 4.4), one per mode.
 *
 * <pre>java -cp HARNESS_CLASSPATH oncelog.harness.TxnClient MODE BOOTSTRAP &lt; spec.json</pre>
 *
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
 * <li>prepare {"transactionalId", "records": [[topic, partition, value]...]}: KIP-939
 *     (transaction.two.phase.commit.enable=true): init, begin, send, prepare, print
 *     {"prepared": state}, then wait (for a SIGKILL) until stdin closes.</li>
 * <li>complete {"transactionalId", "state"}: initTransactions(keepPreparedTxn=true), print
 *     {"recovered": state of the kept transaction}, completeTransaction(state).</li>
 * </ul>
 * kafka-clients 4.4.0 implements KIP-939 in its TransactionManager but its KafkaProducer does
 * not expose initTransactions(boolean), prepareTransaction() or completeTransaction(); the
 * 2PC modes call the TransactionManager as those methods would (see {@link TwoPhase}).
 * Exit code 0 when the mode ran (outcomes are in the output), 1 on an unexpected error.
 */
public final class TxnClient {
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long DEADLINE_MS = 60_000;
    private static final BufferedReader STDIN =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private TxnClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: TxnClient MODE BOOTSTRAP < spec.json");
            System.exit(2);
        }
        Map<?, ?> spec = (Map<?, ?>) Json.parse(STDIN.readLine());
        String bootstrap = args[1];
        switch (args[0]) {
            case "idempotent" -> idempotent(bootstrap, spec);
            case "transactions" -> transactions(bootstrap, spec);
            case "consume" -> consume(bootstrap, spec);
            case "ctp" -> consumeTransformProduce(bootstrap, spec);
            case "fence" -> fence(bootstrap, spec);
            case "prepare" -> prepare(bootstrap, spec);
            case "complete" -> complete(bootstrap, spec);
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

    static Object transactionManagerTv2(KafkaProducer<?, ?> producer) throws Exception {
        return TwoPhase.transactionManager(producer).isTransactionV2Enabled();
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

    static void prepare(String bootstrap, Map<?, ?> spec) throws Exception {
        String txnId = String.valueOf(spec.get("transactionalId"));
        KafkaProducer<String, String> producer = producer(bootstrap, txnId, true);
        TwoPhase.initTransactions(producer, false);
        producer.beginTransaction();
        List<Object> offsets = sendAll(producer, spec.get("records"));
        PreparedTxnState state = TwoPhase.prepareTransaction(producer);
        emit("prepared", state.toString(), "producerId", state.producerId(),
            "epoch", state.epoch(), "offsets", offsets);
        // Keep the transaction open until the test kills this process (or closes stdin).
        STDIN.readLine();
        emit("done", true);
    }

    static void complete(String bootstrap, Map<?, ?> spec) throws Exception {
        String txnId = String.valueOf(spec.get("transactionalId"));
        PreparedTxnState wanted = new PreparedTxnState(String.valueOf(spec.get("state")));
        try (KafkaProducer<String, String> producer = producer(bootstrap, txnId, true)) {
            TwoPhase.initTransactions(producer, true);
            PreparedTxnState kept = TwoPhase.preparedState(producer);
            emit("recovered", kept == null ? null : kept.toString());
            boolean commit = TwoPhase.completeTransaction(producer, wanted);
            emit("completed", commit ? "commit" : "abort");
        }
        emit("done", true);
    }

    /**
     * KIP-939's producer methods, as KafkaProducer implements them where it exposes them:
     * initTransactions(keepPreparedTxn) initializes through the TransactionManager and wakes
     * the sender; prepareTransaction() flushes and moves the TransactionManager to
     * PREPARED_TRANSACTION; completeTransaction(state) commits when state is the prepared
     * transaction's (producer id and epoch) and aborts otherwise.
     */
    static final class TwoPhase {
        private TwoPhase() {}

        static Object field(KafkaProducer<?, ?> producer, String name) throws Exception {
            Field f = KafkaProducer.class.getDeclaredField(name);
            f.setAccessible(true);
            return f.get(producer);
        }

        static TransactionManager transactionManager(KafkaProducer<?, ?> producer)
                throws Exception {
            return (TransactionManager) field(producer, "transactionManager");
        }

        static void initTransactions(KafkaProducer<?, ?> producer, boolean keepPreparedTxn)
                throws Exception {
            TransactionManager tm = transactionManager(producer);
            TransactionalRequestResult result = tm.initializeTransactions(keepPreparedTxn);
            Method wakeup = field(producer, "sender").getClass().getMethod("wakeup");
            wakeup.invoke(field(producer, "sender"));
            result.await((Long) field(producer, "maxBlockTimeMs"), TimeUnit.MILLISECONDS,
                "initTransactions");
            tm.maybeUpdateTransactionV2Enabled(true);
        }

        static PreparedTxnState state(ProducerIdAndEpoch ids) throws Exception {
            Constructor<PreparedTxnState> c =
                PreparedTxnState.class.getDeclaredConstructor(long.class, short.class);
            c.setAccessible(true);
            return c.newInstance(ids.producerId, ids.epoch);
        }

        static PreparedTxnState prepareTransaction(KafkaProducer<?, ?> producer)
                throws Exception {
            producer.flush();
            TransactionManager tm = transactionManager(producer);
            tm.prepareTransaction();
            return state(tm.preparedTransactionState());
        }

        static PreparedTxnState preparedState(KafkaProducer<?, ?> producer) throws Exception {
            TransactionManager tm = transactionManager(producer);
            return tm.isPrepared() ? state(tm.preparedTransactionState()) : null;
        }

        static boolean completeTransaction(KafkaProducer<?, ?> producer, PreparedTxnState wanted)
                throws Exception {
            PreparedTxnState kept = preparedState(producer);
            if (kept == null) {
                throw new IllegalStateException("no prepared transaction to complete");
            }
            boolean commit = kept.equals(wanted);
            if (commit) {
                producer.commitTransaction();
            } else {
                producer.abortTransaction();
            }
            return commit;
        }
    }
}
