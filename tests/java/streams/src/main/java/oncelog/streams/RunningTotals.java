package oncelog.streams;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * A small stateful Kafka Streams 4.3 topology run with {@code processing.guarantee=exactly_once_v2}.
 *
 * <p>Usage: {@code RunningTotals BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR GROUPS}.
 * Input records are {@code key=account ("a<number>"), value=amount (a decimal integer)}. The
 * topology re-keys each record by group ({@code "g" + number % GROUPS}: a repartition topic),
 * aggregates per group into the state store {@code totals} (a changelog topic), and writes
 * every update of the store as {@code key=group, value="<count>,<sum>"} to OUTPUT. The record
 * cache is off, so every input record yields exactly one output record, and under
 * exactly-once the committed output of a group has the counts 1, 2, 3, ... with no gap and
 * no repeat, whatever crashed.
 *
 * <p>Runs until SIGTERM (closes Streams, then exits 0) or SIGKILL. Prints one JSON line per
 * state change ({@code {"state":"RUNNING"}}) and per uncaught exception
 * ({@code {"error":"..."}}; the stream thread is then replaced).
 */
public final class RunningTotals {
    private RunningTotals() {}

    static Topology topology(String input, String output, int groups) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((account, amount) -> "g" + Long.parseLong(account.substring(1)) % groups,
                     Grouped.with("by-group", Serdes.String(), Serdes.String()))
            .aggregate(() -> "0,0", RunningTotals::add,
                       Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("totals")
                           .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return builder.build();
    }

    static String add(String group, String amount, String total) {
        int comma = total.indexOf(',');
        long count = Long.parseLong(total.substring(0, comma));
        long sum = Long.parseLong(total.substring(comma + 1));
        return (count + 1) + "," + (sum + Long.parseLong(amount));
    }

    static Properties config(String bootstrap, String applicationId, String stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // Purge the repartition topic (DeleteRecords) every second rather than every 30 s,
        // so that a short run exercises it.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        // A killed instance leaves its member in the group until the session expires: keep
        // it short (the broker's group.min.session.timeout.ms is 6 s) so the restart is quick.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        return props;
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 6) {
            System.err.println("usage: RunningTotals BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR GROUPS");
            System.exit(2);
        }
        Topology topology = topology(args[2], args[3], Integer.parseInt(args[5]));
        KafkaStreams streams = new KafkaStreams(topology, config(args[0], args[1], args[4]));
        CountDownLatch closed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> emit("state", now.name()));
        streams.setUncaughtExceptionHandler(exc -> {
            emit("error", exc.toString());
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            closed.countDown();
        }, "running-totals-shutdown"));
        streams.start();
        closed.await();
    }

    private static synchronized void emit(String field, String value) {
        String escaped = value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ");
        System.out.println("{\"" + field + "\":\"" + escaped + "\"}");
        System.out.flush();
    }
}
