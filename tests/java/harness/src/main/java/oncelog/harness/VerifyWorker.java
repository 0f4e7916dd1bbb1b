package oncelog.harness;

import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client (kafka-clients 4.4) as an {@code oncelog verify} worker: the workload of
 * docs/verify.md and oncelog/verify/workload.py, written as a Java exactly-once application.
 *
 * <pre>java -cp HARNESS_CLASSPATH oncelog.harness.VerifyWorker work --bootstrap B --process N
 *     --slot S --seed K --input T --output T --partitions P --group G --transactional-id X
 *     --out FILE --started-at T0 [--abort-ratio 0.1] [--transaction-timeout-ms 10000]
 *     [--command-config CLIENT.PROPERTIES]</pre>
 *
 * {@code --command-config}: client configs (security.protocol, sasl.*, ssl.*, ...) given to
 * the producer and the consumer after the worker's own, as Kafka's tools take them.
 *
 * One transactional producer and one read_committed consumer in the group, subscribed to the
 * input topic. Each transaction: begin; poll once (up to 20 records); send 1-4 fresh values
 * {@code "<process>.<seq>.<i>"} to random partitions of both topics and, for each polled
 * value v, {@code "x:"+v} to the output topic's partition of the same number;
 * sendOffsetsToTransaction(positions after the polled records, groupMetadata()); commit, or
 * abort with probability abort-ratio (seeded). Every transaction appends two lines to
 * {@code --out}, each flushed: an {@code invoke} line after the poll, before the first send,
 * and its {@code op} line when it ends, in the field layout of oncelog.verify.history.op_line.
 *
 * <p>Outcomes: ok = commitTransaction returned; fail = commitTransaction never called;
 * unknown = commitTransaction called and threw. Errors as the KafkaProducer javadoc says:
 * ProducerFencedException, OutOfOrderSequenceException, AuthorizationException (and
 * UnsupportedVersionException) are fatal: the op line is written and the process exits 3
 * (the runner restarts the slot as a new process). Any other KafkaException aborts the
 * transaction; a timeout of commit or abort, or a failed abort, closes the producer and
 * makes a new one (a new producer_session; its initTransactions completes or aborts what the
 * old one left). After an abort or a failure the consumer seeks back to the group's committed
 * offsets and starts a new poll session; so does every rebalance.
 *
 * <p>SIGTERM: the shutdown hook asks the loop to stop, the current transaction ends (aborted
 * when the commit was not yet asked), the clients close and the JVM halts with 0 (or with the
 * loop's non-zero code).
 */
public final class VerifyWorker {
    private static final String CLIENT = "java";
    private static final Duration POLL = Duration.ofMillis(200);
    private static final Duration CALL_TIMEOUT = Duration.ofSeconds(15);
    private static final int MAX_POLL_RECORDS = 20;
    private static final int EXIT_FATAL = 3;
    private static final String LOG_LEVEL = "org.slf4j.simpleLogger.defaultLogLevel";

    private final Map<String, String> flags;
    private final String bootstrap;
    private final int process;
    private final String input;
    private final String output;
    private final int partitions;
    private final String group;
    private final String transactionalId;
    private final double startedAt;
    private final double abortRatio;
    private final int transactionTimeoutMs;
    private final Properties clientConfig = new Properties();
    private final Random rng;
    private final BufferedWriter out;

    private volatile boolean stopping;
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile int exitCode;

    private KafkaProducer<String, String> producer;
    private KafkaConsumer<String, String> consumer;
    private int producerSession = -1;
    private int pollSession;
    private boolean needSeek;
    private int seq;

    private VerifyWorker(Map<String, String> flags) throws IOException {
        this.flags = flags;
        bootstrap = flag("bootstrap");
        process = Integer.parseInt(flag("process"));
        input = flag("input");
        output = flag("output");
        partitions = Integer.parseInt(flag("partitions"));
        group = flag("group");
        transactionalId = flag("transactional-id");
        startedAt = Double.parseDouble(flag("started-at"));
        abortRatio = Double.parseDouble(flags.getOrDefault("abort-ratio", "0.1"));
        transactionTimeoutMs = Integer.parseInt(flags.getOrDefault("transaction-timeout-ms", "10000"));
        String commandConfig = flags.get("command-config");
        if (commandConfig != null) {
            try (Reader reader = Files.newBufferedReader(Path.of(commandConfig))) {
                clientConfig.load(reader);
            }
        }
        long seed = Long.parseLong(flag("seed"));
        // One stream per process: a restarted slot does not replay its predecessor's choices.
        rng = new Random(seed * 1_000_003L + process);
        flag("slot");
        out = new BufferedWriter(new OutputStreamWriter(
            new FileOutputStream(flag("out"), true), StandardCharsets.UTF_8));
    }

    public static void main(String[] args) throws Exception {
        // The clients' INFO lines (every config value) would drown the worker's own log.
        if (System.getProperty(LOG_LEVEL) == null) {
            System.setProperty(LOG_LEVEL, "warn");
        }
        if (args.length < 1 || !args[0].equals("work")) {
            System.err.println("usage: VerifyWorker work --bootstrap B --process N ... (see the javadoc)");
            System.exit(2);
        }
        Map<String, String> flags = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                System.err.println("VerifyWorker: bad argument " + args[i]);
                System.exit(2);
            }
            flags.put(args[i].substring(2), args[++i]);
        }
        String client = flags.remove("client");
        if (client != null && !client.equals(CLIENT)) {
            System.err.println("VerifyWorker: --client must be java, not " + client);
            System.exit(2);
        }
        VerifyWorker worker = new VerifyWorker(flags);
        Runtime.getRuntime().addShutdownHook(new Thread(worker::onShutdown, "verify-shutdown"));
        int code;
        try {
            code = worker.run();
        } catch (Throwable e) {
            worker.log("fatal: " + describe(e));
            code = 1;
        }
        worker.exitCode = code;
        worker.finished.countDown();
        if (!worker.stopping) {
            System.exit(code);
        }
        // A SIGTERM is being handled: the shutdown hook halts with exitCode.
    }

    private String flag(String name) {
        String value = flags.get(name);
        if (value == null) {
            throw new IllegalArgumentException("VerifyWorker: --" + name + " is required");
        }
        return value;
    }

    /** SIGTERM (or System.exit): stop after the current transaction, then halt with its code
     * (the JVM would otherwise report 143 for a SIGTERM). */
    private void onShutdown() {
        stopping = true;
        try {
            if (!finished.await(transactionTimeoutMs + 60_000L, TimeUnit.MILLISECONDS)) {
                log("the current transaction did not end in time; exiting anyway");
                Runtime.getRuntime().halt(1);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Runtime.getRuntime().halt(exitCode);
    }

    // -- the loop ----------------------------------------------------------------------------

    private int run() throws IOException {
        consumer = newConsumer();
        consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                rebalanced("revoked", revoked);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                rebalanced("assigned", assigned);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> lost) {
                rebalanced("lost", lost);
            }
        });
        try {
            if (!newProducer()) {
                return 0;
            }
            while (!stopping) {
                if (needSeek && !seekToCommitted()) {
                    continue;
                }
                if (!transaction()) {
                    return EXIT_FATAL;
                }
            }
            return 0;
        } finally {
            closeQuietly();
            out.flush();
        }
    }

    private void rebalanced(String what, Collection<TopicPartition> partitions) {
        pollSession++;
        log("rebalance: " + what + " " + partitions + "; poll session " + pollSession);
    }

    /** One transaction; false after a fatal error (its op line is written). */
    private boolean transaction() throws IOException {
        Map<String, Object> op = new LinkedHashMap<>();
        op.put("process", process);
        op.put("client", CLIENT);
        op.put("seq", seq++);
        op.put("invoke", now());
        op.put("complete", null);
        op.put("outcome", "unknown");
        List<Map<String, Object>> sends = new ArrayList<>();
        op.put("sends", sends);
        List<Map<String, Object>> polls = new ArrayList<>();
        op.put("polls", polls);
        op.put("group", group);
        Map<String, Object> offsets = new LinkedHashMap<>();
        op.put("offsets", offsets);
        op.put("producer_session", producerSession);
        op.put("error", null);
        op.put("index", -1);

        boolean committing = false;
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        try {
            producer.beginTransaction();
            ConsumerRecords<String, String> records = consumer.poll(POLL);
            Map<String, Object> reads = new LinkedHashMap<>();
            Map<TopicPartition, OffsetAndMetadata> positions = new LinkedHashMap<>();
            for (TopicPartition tp : records.partitions()) {
                List<Object> pairs = new ArrayList<>();
                for (ConsumerRecord<String, String> r : records.records(tp)) {
                    pairs.add(List.of(r.offset(), r.value()));
                }
                reads.put(tpKey(tp), pairs);
                long position = consumer.position(tp, CALL_TIMEOUT);
                positions.put(tp, new OffsetAndMetadata(position));
                offsets.put(tpKey(tp), position);
            }
            Map<String, Object> poll = new LinkedHashMap<>();
            poll.put("reads", reads);
            poll.put("session", pollSession);
            polls.add(poll);

            List<ProducerRecord<String, String>> planned = new ArrayList<>();
            int fresh = 1 + rng.nextInt(4);
            for (int i = 0; i < fresh; i++) {
                String topic = rng.nextBoolean() ? input : output;
                String value = process + "." + op.get("seq") + "." + i;
                planned.add(new ProducerRecord<>(topic, rng.nextInt(partitions), null, value));
                sends.add(send(new TopicPartition(topic, planned.get(i).partition()), value, null));
            }
            for (ConsumerRecord<String, String> r : records) {
                String value = "x:" + r.value();
                planned.add(new ProducerRecord<>(output, r.partition(), null, value));
                sends.add(send(new TopicPartition(output, r.partition()), value, r.value()));
            }
            write("invoke", op);

            for (ProducerRecord<String, String> record : planned) {
                futures.add(producer.send(record));
            }
            if (!positions.isEmpty()) {
                producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
            }
            // Flush first so that a failed send aborts the transaction (outcome fail)
            // rather than failing the commit (outcome unknown).
            producer.flush();
            for (Future<RecordMetadata> f : futures) {
                f.get();
            }
            if (stopping || rng.nextDouble() < abortRatio) {
                producer.abortTransaction();
                op.put("outcome", "fail");
                op.put("error", stopping ? "stopping" : null);
                needSeek = true;
            } else {
                committing = true;
                producer.commitTransaction();
                op.put("outcome", "ok");
            }
        } catch (Exception e) {
            Throwable cause = cause(e);
            op.put("outcome", committing ? "unknown" : "fail");
            op.put("error", describe(cause));
            needSeek = true;
            if (fatal(cause)) {
                log("transaction " + op.get("seq") + ": fatal " + describe(cause));
                finish(op, futures);
                return false;
            }
            log("transaction " + op.get("seq") + " failed: " + describe(cause));
            Throwable abortError = abortQuietly();
            if (abortError != null && fatal(abortError)) {
                // Fenced while aborting: a newer incarnation owns the transactional id, and a
                // new producer here would fence it in turn.
                log("transaction " + op.get("seq") + ": fatal " + describe(abortError));
                op.put("error", describe(cause) + "; then abortTransaction: " + describe(abortError));
                finish(op, futures);
                return false;
            }
            if ((committing && cause instanceof TimeoutException) || abortError != null) {
                // A commit that timed out, or an abort that failed, leaves the transaction's
                // end to a new producer: its initTransactions completes or aborts it.
                finish(op, futures);
                closeProducer();
                return newProducer() || stopping;
            }
        }
        finish(op, futures);
        return true;
    }

    private static Map<String, Object> send(TopicPartition tp, String value, String source) {
        Map<String, Object> send = new LinkedHashMap<>();
        send.put("tp", tpKey(tp));
        send.put("value", value);
        send.put("offset", null);
        send.put("source", source);
        return send;
    }

    /** The op line: completion time and the delivery offsets the futures have. */
    private void finish(Map<String, Object> op, List<Future<RecordMetadata>> futures)
            throws IOException {
        if (!"unknown".equals(op.get("outcome"))) {
            op.put("complete", now());
        }
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> sends = (List<Map<String, Object>>) op.get("sends");
        for (int i = 0; i < futures.size(); i++) {
            Future<RecordMetadata> f = futures.get(i);
            if (f.isDone()) {
                try {
                    sends.get(i).put("offset", f.get().offset());
                } catch (ExecutionException | InterruptedException e) {
                    // no delivery report: the offset stays unknown
                }
            }
        }
        write("op", op);
    }

    /** Abort the current transaction; the error when that failed, else null. */
    private Throwable abortQuietly() {
        try {
            producer.abortTransaction();
            return null;
        } catch (Exception e) {
            log("abortTransaction failed: " + describe(cause(e)));
            return cause(e);
        }
    }

    /** Seek every assigned partition back to the group's committed offset (the beginning
     * when none) and start a new poll session; false when the offsets could not be read. */
    private boolean seekToCommitted() {
        try {
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> committed = assigned.isEmpty()
                ? Map.of() : consumer.committed(assigned, CALL_TIMEOUT);
            for (TopicPartition tp : assigned) {
                OffsetAndMetadata at = committed.get(tp);
                if (at == null) {
                    consumer.seekToBeginning(List.of(tp));
                } else {
                    consumer.seek(tp, at.offset());
                }
            }
            needSeek = false;
            pollSession++;
            return true;
        } catch (KafkaException e) {
            log("reading the committed offsets failed: " + describe(cause(e)));
            return false;
        }
    }

    // -- clients -----------------------------------------------------------------------------

    /** A new transactional producer, initialised; false when stopping before it could be. */
    private boolean newProducer() {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(transactionTimeoutMs));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(CALL_TIMEOUT.toMillis()));
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        props.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        props.putAll(clientConfig);
        producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
        producerSession++;
        while (true) {
            try {
                producer.initTransactions();
                log("producer session " + producerSession + " initialised (" + transactionalId + ")");
                return true;
            } catch (TimeoutException e) {
                // initTransactions may be retried after a timeout (KafkaProducer javadoc)
                log("initTransactions timed out; retrying");
                if (stopping) {
                    return false;
                }
            }
        }
    }

    private KafkaConsumer<String, String> newConsumer() {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(MAX_POLL_RECORDS));
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "3000");
        props.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(CALL_TIMEOUT.toMillis()));
        props.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        props.putAll(clientConfig);
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private void closeProducer() {
        try {
            producer.close(Duration.ofSeconds(5));
        } catch (Exception e) {
            log("closing the producer failed: " + describe(cause(e)));
        }
    }

    private void closeQuietly() {
        if (producer != null) {
            closeProducer();
        }
        try {
            consumer.close(Duration.ofSeconds(5));
        } catch (Exception e) {
            log("closing the consumer failed: " + describe(cause(e)));
        }
    }

    /** The errors a Java EOS application cannot continue after (KafkaProducer javadoc). */
    private static boolean fatal(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ProducerFencedException || t instanceof OutOfOrderSequenceException
                    || t instanceof AuthorizationException || t instanceof UnsupportedVersionException) {
                return true;
            }
        }
        return false;
    }

    // -- output ------------------------------------------------------------------------------

    private void write(String type, Map<String, Object> op) throws IOException {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("type", type);
        line.putAll(op);
        out.write(Json.write(line));
        out.write('\n');
        out.flush();
    }

    private double now() {
        return Math.round((System.currentTimeMillis() / 1000.0 - startedAt) * 1e6) / 1e6;
    }

    private static String tpKey(TopicPartition tp) {
        return tp.topic() + "/" + tp.partition();
    }

    private static Throwable cause(Throwable e) {
        return e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
    }

    private static String describe(Throwable e) {
        return e.getClass().getSimpleName() + ": " + e.getMessage();
    }

    private void log(String message) {
        System.err.println("VerifyWorker p" + process + ": " + message);
        System.err.flush();
    }
}
