package oncelog.harness;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.DescribeTransactionsResult;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.FenceProducersResult;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

/** AdminProbe's transaction operations (Java AdminClient, kafka-clients 4.4). */
final class TxnAdmin {
    private TxnAdmin() {}

    static Object listTransactions(Admin admin, Map<?, ?> op) throws Exception {
        ListTransactionsOptions options = new ListTransactionsOptions();
        if (op.get("states") != null) {
            List<TransactionState> states = new ArrayList<>();
            for (String s : AdminProbe.strings(op.get("states"))) {
                states.add(TransactionState.parse(s));
            }
            options.filterStates(states);
        }
        if (op.get("producerIds") != null) {
            List<Long> ids = new ArrayList<>();
            for (Object o : (List<?>) op.get("producerIds")) {
                ids.add(((Number) o).longValue());
            }
            options.filterProducerIds(ids);
        }
        if (op.get("durationMs") != null) {
            options.filterOnDuration(((Number) op.get("durationMs")).longValue());
        }
        if (op.get("pattern") != null) {
            options.filterOnTransactionalIdPattern(String.valueOf(op.get("pattern")));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        for (TransactionListing l : AdminProbe.get(admin.listTransactions(options).all())) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("producerId", l.producerId());
            one.put("state", l.state().toString());
            out.put(l.transactionalId(), one);
        }
        return out;
    }

    static Object describeTransactions(Admin admin, Map<?, ?> op) {
        List<String> ids = AdminProbe.strings(op.get("ids"));
        DescribeTransactionsResult result = admin.describeTransactions(ids);
        Map<String, KafkaFuture<TransactionDescription>> futures = new LinkedHashMap<>();
        for (String id : ids) {
            futures.put(id, result.description(id));
        }
        return AdminProbe.perKey(futures, TxnAdmin::transaction);
    }

    static Object transaction(TransactionDescription d) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("coordinatorId", d.coordinatorId());
        out.put("state", d.state().toString());
        out.put("producerId", d.producerId());
        out.put("producerEpoch", d.producerEpoch());
        out.put("timeoutMs", d.transactionTimeoutMs());
        out.put("startTimeMs", d.transactionStartTimeMs().isPresent()
            ? d.transactionStartTimeMs().getAsLong() : null);
        List<String> partitions = new ArrayList<>();
        for (TopicPartition tp : d.topicPartitions()) {
            partitions.add(tp.toString());
        }
        partitions.sort(null);
        out.put("partitions", partitions);
        return out;
    }

    static Object describeProducers(Admin admin, Map<?, ?> op) {
        List<TopicPartition> tps = new ArrayList<>();
        for (Object p : (List<?>) op.get("partitions")) {
            tps.add(AdminProbe.partition(p));
        }
        DescribeProducersResult result = admin.describeProducers(tps);
        Map<TopicPartition, KafkaFuture<PartitionProducerState>> futures = new LinkedHashMap<>();
        for (TopicPartition tp : tps) {
            futures.put(tp, result.partitionResult(tp));
        }
        return AdminProbe.perKey(futures,
            (PartitionProducerState state) -> {
                List<Object> producers = new ArrayList<>();
                for (ProducerState p : state.activeProducers()) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("producerId", p.producerId());
                    one.put("producerEpoch", p.producerEpoch());
                    one.put("lastSequence", p.lastSequence());
                    one.put("lastTimestamp", p.lastTimestamp());
                    one.put("coordinatorEpoch", p.coordinatorEpoch().isPresent()
                        ? p.coordinatorEpoch().getAsInt() : null);
                    one.put("currentTransactionStartOffset",
                        p.currentTransactionStartOffset().isPresent()
                            ? p.currentTransactionStartOffset().getAsLong() : null);
                    producers.add(one);
                }
                return producers;
            });
    }

    static Object abortTransaction(Admin admin, Map<?, ?> op) throws Exception {
        AbortTransactionSpec spec = new AbortTransactionSpec(
            new TopicPartition(String.valueOf(op.get("topic")), AdminProbe.integer(op, "partition")),
            ((Number) op.get("producerId")).longValue(),
            (short) AdminProbe.integer(op, "producerEpoch"),
            AdminProbe.integer(op, "coordinatorEpoch"));
        AdminProbe.get(admin.abortTransaction(spec).all());
        return null;
    }

    static Object fenceProducers(Admin admin, Map<?, ?> op) throws Exception {
        List<String> ids = AdminProbe.strings(op.get("ids"));
        FenceProducersResult result = admin.fenceProducers(ids);
        Map<String, Object> out = new LinkedHashMap<>();
        for (String id : ids) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                one.put("producerId", AdminProbe.get(result.producerId(id)));
                one.put("epoch", AdminProbe.get(result.epochId(id)));
                one.put("ok", true);
            } catch (Exception e) {
                one.put("ok", false);
                one.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            out.put(id, one);
        }
        return out;
    }

    static Object forceTerminateTransaction(Admin admin, Map<?, ?> op) throws Exception {
        AdminProbe.get(admin.forceTerminateTransaction(String.valueOf(op.get("id"))).result());
        return null;
    }
}
