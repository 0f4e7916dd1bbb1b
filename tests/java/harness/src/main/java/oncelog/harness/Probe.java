package oncelog.harness;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Smallest harness program: produce N records to a topic in one transaction with
 * kafka-clients, commit, and print one JSON line describing what happened.
 *
 * <pre>java -cp HARNESS_CLASSPATH oncelog.harness.Probe BOOTSTRAP TOPIC N [TRANSACTIONAL_ID]</pre>
 *
 * Output (stdout, one line): {"client":"kafka-clients","version":"4.4.0","topic":"t",
 * "records":N,"partition":0,"first_offset":0,"last_offset":N-1,"committed":true}.
 * Exit code 0 on commit, 1 on any error (the error is printed on stderr).
 */
public final class Probe {
    private Probe() {}

    /** kafka-clients' own version, from the properties file inside its jar. */
    static String clientVersion() throws IOException {
        Properties version = new Properties();
        try (InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                version.load(in);
            }
        }
        return version.getProperty("version", "unknown");
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: Probe BOOTSTRAP TOPIC N [TRANSACTIONAL_ID]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String transactionalId = args.length > 3 ? args[3] : "probe-" + UUID.randomUUID();

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        long first = -1;
        long last = -1;
        int partition = -1;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < count; i++) {
                RecordMetadata meta = producer
                    .send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i))
                    .get();
                if (first < 0) {
                    first = meta.offset();
                }
                last = meta.offset();
                partition = meta.partition();
            }
            producer.commitTransaction();
        }
        System.out.println(String.format(
            "{\"client\":\"kafka-clients\",\"version\":\"%s\",\"topic\":\"%s\",\"records\":%d,"
                + "\"partition\":%d,\"first_offset\":%d,\"last_offset\":%d,\"committed\":true}",
            clientVersion(),
            topic, count, partition, first, last));
    }
}
