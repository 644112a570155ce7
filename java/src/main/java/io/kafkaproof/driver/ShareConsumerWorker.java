package io.kafkaproof.driver;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.SplittableRandom;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Recording share consumer (KIP-932, issue 46): one member of a share group, in a consumer's place.
 *
 * <p>Every record a poll returns is one <em>delivery</em> (the broker acquired it for this consumer): it is
 * written, with the delivery count the broker reported, and handed to the OS before the record is processed, so a
 * consumer killed mid-acquisition leaves its deliveries in the ledger. Then each record takes
 * {@code processing_ms} and is acknowledged by the spec's {@code ack} policy: accept; release with probability
 * {@code release}; reject with probability {@code reject}; no acknowledgement for a fraction {@code no_ack}; a
 * poison value (every {@code poison_every}-th of each producer) is always released, until the broker gives it up
 * at the delivery limit. Explicit mode commits the batch's acknowledgements with {@code commitSync}; implicit mode
 * lets the next poll accept the previous batch. Every acknowledgement's result (the commit's, or the
 * acknowledgement commit callback's) is one <em>ack</em> row.
 *
 * <p>Explicit mode requires every record of a poll to be acknowledged before the next poll
 * ({@code IllegalStateException} otherwise), so a "no acknowledgement" record is held, unacknowledged, until its
 * acquisition lock has timed out ({@code lock_timeout_ms} + 1 s after its poll), and only then released: the
 * broker has taken it back by then, so that late release normally fails and is recorded as failed.
 *
 * <p>Compiled against kafka-clients 3.9.2, whose share consumer API has 4.x's signatures;
 * {@code ConsumerRecord.deliveryCount()} (4.0+) is read by reflection.
 */
final class ShareConsumerWorker {
    private static final String[] OWNED = {ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, ConsumerConfig.GROUP_ID_CONFIG,
        ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
        ConsumerConfig.GROUP_PROTOCOL_CONFIG, "share.acknowledgement.mode"};
    static final String ACK_MODE_CONFIG = "share.acknowledgement.mode";
    static final double CLOSE_TIMEOUT_S = 5;
    private static final long NO_ACK_MARGIN_MS = 1000;
    private static final Method DELIVERY_COUNT = deliveryCountMethod();

    private final Spec spec;
    private final Lifecycle lc;
    private final int index;
    private final int incarnation;
    private final int pid = (int) ProcessHandle.current().pid();
    private final boolean explicit;
    private final double release;
    private final double reject;
    private final double noAck;
    private final long poisonEvery;
    private final long lockMs;
    private final SplittableRandom random;
    private final Notifier notifier;
    private Tsv deliveries;
    private Tsv acks;
    private Tsv members;
    private Progress progress;
    private KafkaShareConsumer<byte[], byte[]> consumer;
    private long delivered;
    private long polls;
    private final Map<String, Long> acked = new HashMap<>();
    private final Map<String, Long> ackFailed = new HashMap<>();
    // acknowledgements sent, waiting for their result: (partition, offset) -> (delivery id, type)
    private final Map<Long, Pending> pending = new HashMap<>();

    private record Pending(long deliveryId, int partition, long offset, String type) {
    }

    ShareConsumerWorker(Spec spec, Lifecycle lc) {
        this.spec = spec;
        this.lc = lc;
        this.index = (int) spec.lng("index");
        this.incarnation = (int) spec.lng("incarnation", 0);
        Spec share = spec.sub("share");
        if (share == null) {
            throw new Spec.SpecException("share: missing (a share consumer's spec names its share section)");
        }
        Spec ack = share.sub("ack");
        String mode = ack == null ? "explicit" : ack.str("mode", "explicit");
        if (!mode.equals("explicit") && !mode.equals("implicit")) {
            throw new Spec.SpecException("share.ack.mode: unknown mode '" + mode + "'; allowed: explicit, implicit");
        }
        this.explicit = mode.equals("explicit");
        this.release = ack == null ? 0 : ack.dbl("release", 0);
        this.reject = ack == null ? 0 : ack.dbl("reject", 0);
        this.noAck = ack == null ? 0 : ack.dbl("no_ack", 0);
        this.poisonEvery = ack == null ? 0 : ack.lng("poison_every", 0);
        this.lockMs = share.lng("lock_timeout_ms", 30_000);
        this.random = new SplittableRandom(share.lng("seed", 0) * 1_000_003L + index * 1009L + incarnation);
        this.notifier = new Notifier(spec.str("notify", null));
    }

    private static Method deliveryCountMethod() {
        try {
            return ConsumerRecord.class.getMethod("deliveryCount");
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /** The delivery count the broker reported for {@code r} (-1: this kafka-clients has none). */
    static int deliveryCount(ConsumerRecord<?, ?> r) {
        if (DELIVERY_COUNT == null) {
            return -1;
        }
        try {
            Object v = DELIVERY_COUNT.invoke(r);
            if (v instanceof Optional<?> o && o.isPresent() && o.get() instanceof Number n) {
                return n.intValue();
            }
            return -1;
        } catch (ReflectiveOperationException e) {
            return -1;
        }
    }

    /** The run-unique id of this process's {@code n}-th delivery. */
    static long deliveryId(int index, int incarnation, long n) {
        return ((long) index << 48) | ((long) incarnation << 32) | n;
    }

    /** True for a poison value: every {@code every}-th value of each producer (value id = producer << 32 + seq). */
    static boolean poison(long valueId, long every) {
        return every > 0 && valueId >= 0 && ((valueId & 0xffffffffL) + 1) % every == 0;
    }

    /** The acknowledgement for a value: "accept", "release", "reject" or "none", by the policy and a draw u in [0, 1). */
    static String decide(long valueId, long poisonEvery, double release, double reject, double noAck, double u) {
        if (poison(valueId, poisonEvery)) {
            return "release";
        }
        if (u < release) {
            return "release";
        }
        if (u < release + reject) {
            return "reject";
        }
        if (u < release + reject + noAck) {
            return "none";
        }
        return "accept";
    }

    /** Properties the share consumer is created with: the cluster's connection, the scenario's config, then what the driver owns. */
    static Properties properties(Spec spec) {
        Properties p = new Properties();
        for (Map.Entry<String, Object> e : Spec.connection().entrySet()) {
            p.setProperty(e.getKey(), Spec.propertyValue(e.getValue()));
        }
        Spec config = spec.sub("config");
        if (config != null) {
            for (Map.Entry<String, Object> e : config.m.entrySet()) {
                if (List.of(OWNED).contains(e.getKey())) {
                    Log.warn("config." + e.getKey() + " ignored: the driver sets it from the spec");
                } else if (e.getValue() != null) {
                    p.setProperty(e.getKey(), Spec.propertyValue(e.getValue()));
                }
            }
        }
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap"));
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, spec.str("group"));
        Spec share = spec.sub("share");
        Spec ack = share == null ? null : share.sub("ack");
        p.setProperty(ACK_MODE_CONFIG, ack == null ? "explicit" : ack.str("mode", "explicit"));
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    private static long key(int partition, long offset) {
        return ((long) partition << 40) | offset;
    }

    private void member(String event) {
        synchronized (members) {
            members.l(index).l(pid).s(spec.str("group")).nul().s(event).l(System.nanoTime()).end();
        }
        try {
            members.flush();
        } catch (IOException e) {
            Log.warn("could not write a member event: " + e);
        }
    }

    /** One ack row: the result of a pending acknowledgement. */
    private void ackResult(Pending p, Exception error) {
        boolean ok = error == null;
        synchronized (acks) {
            acks.l(p.deliveryId).l(index).l(pid).l(p.partition).l(p.offset).s(p.type).l(System.nanoTime()).b(ok)
                    .s(ok ? null : error.getClass().getSimpleName() + ": " + error.getMessage()).end();
        }
        (ok ? acked : ackFailed).merge(p.type, 1L, Long::sum);
    }

    /** The acknowledgement commit callback: results of acknowledgements, whichever call committed them. */
    private void onAcknowledged(Map<TopicIdPartition, Set<Long>> offsets, Exception error) {
        for (Map.Entry<TopicIdPartition, Set<Long>> e : offsets.entrySet()) {
            int partition = e.getKey().partition();
            for (long offset : e.getValue()) {
                Pending p = pending.remove(key(partition, offset));
                if (p != null) {
                    ackResult(p, error);
                }
            }
        }
    }

    /** Commits the pending acknowledgements (explicit: those acknowledged; implicit: the delivered batch). */
    private void commit(Duration timeout) {
        if (pending.isEmpty()) {
            return;
        }
        Map<TopicIdPartition, Optional<KafkaException>> results;
        lc.blocking(true);
        try {
            results = consumer.commitSync(timeout);
        } catch (KafkaException e) {  // InterruptException, WakeupException...: the results are unknown
            Log.warn("commitSync failed: " + e);
            results = Map.of();
        } finally {
            lc.blocking(false);
        }
        Map<Integer, Optional<KafkaException>> byPartition = new HashMap<>();
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : results.entrySet()) {
            byPartition.put(e.getKey().partition(), e.getValue());
        }
        for (Pending p : new ArrayList<>(pending.values())) {  // not reported by the callback yet
            Optional<KafkaException> r = byPartition.get(p.partition);
            if (r != null) {
                pending.remove(key(p.partition, p.offset));
                ackResult(p, r.orElse(null));
            }
        }
        if (results.values().stream().anyMatch(Optional::isEmpty)) {  // a trigger `consumer_commit` waits for it
            notifier.send("{\"consumer\":" + index + ",\"incarnation\":" + incarnation
                    + ",\"event\":\"commit\",\"ts_ns\":" + System.nanoTime() + "}");
        }
    }

    private void acknowledge(ConsumerRecord<byte[], byte[]> r, long deliveryId, String type) {
        AcknowledgeType t = switch (type) {
            case "accept" -> AcknowledgeType.ACCEPT;
            case "release" -> AcknowledgeType.RELEASE;
            case "reject" -> AcknowledgeType.REJECT;
            default -> throw new IllegalArgumentException("not an acknowledgement type: " + type);
        };
        consumer.acknowledge(r, t);
        pending.put(key(r.partition(), r.offset()), new Pending(deliveryId, r.partition(), r.offset(), type));
    }

    private void writeProgress(boolean done) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"read\":").append(delivered).append(",\"polls\":").append(polls).append(",\"pending_acks\":")
                .append(pending.size()).append(',');
        Progress.counts(b, "acked", acked);
        b.append(',');
        Progress.counts(b, "ack_failed", ackFailed);
        b.append(",\"client\":\"java\",\"share\":true");
        progress.publish(b, done);
    }

    /** Consumes until told to stop; returns the exit code. */
    int run() throws IOException {
        Path out = Path.of(spec.str("out"));
        String prefix = "consumer-" + index + "-" + incarnation;
        deliveries = new Tsv(out.resolve(prefix + ".share_deliveries.tsv"), 1 << 16);
        acks = new Tsv(out.resolve(prefix + ".share_acks.tsv"), 1 << 16);
        members = new Tsv(out.resolve(prefix + ".share_members.tsv"), 1024);
        progress = new Progress(out.resolve(prefix + ".progress.json"));
        lc.onTick(() -> {
            try {
                deliveries.flush();
                acks.flush();
            } catch (IOException e) {
                Log.warn("could not write a stream: " + e);
            }
        });
        long processingMs = (long) spec.dbl("processing_ms", 0);
        if (DELIVERY_COUNT == null) {
            Log.warn("this kafka-clients has no ConsumerRecord.deliveryCount(): delivery counts are recorded as -1");
        }
        consumer = new KafkaShareConsumer<>(properties(spec));
        consumer.setAcknowledgementCommitCallback(this::onAcknowledged);
        consumer.subscribe(List.of(spec.str("topic")));
        member("start");
        writeProgress(false);

        long n = 0;
        long lastProgress = 0;
        Duration commitTimeout = Duration.ofSeconds(30);
        while (!lc.stopping()) {
            ConsumerRecords<byte[], byte[]> batch;
            lc.blocking(true);
            try {
                batch = consumer.poll(Duration.ofMillis(200));
            } catch (org.apache.kafka.common.errors.InterruptException e) {
                break;
            } finally {
                lc.blocking(false);
            }
            long now = System.nanoTime();
            polls++;
            if (!batch.isEmpty()) {
                List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>(batch.count());
                long[] ids = new long[batch.count()];
                synchronized (deliveries) {
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        long id = deliveryId(index, incarnation, n++);
                        ids[records.size()] = id;
                        records.add(r);
                        deliveries.l(id).l(index).l(pid).l(r.partition()).l(r.offset()).l(Payload.decode(r.value()))
                                .l(deliveryCount(r)).l(now).end();
                    }
                }
                deliveries.flush();  // on disk before anything is acknowledged: a killed consumer's too
                delivered += records.size();
                List<Integer> held = new ArrayList<>();
                for (int k = 0; k < records.size(); k++) {
                    ConsumerRecord<byte[], byte[]> r = records.get(k);
                    if (!explicit) {  // the next poll (or the final commit) accepts it
                        lc.sleepUntil(System.nanoTime() + processingMs * 1_000_000L);
                        pending.put(key(r.partition(), r.offset()), new Pending(ids[k], r.partition(), r.offset(),
                                "accept"));
                        continue;
                    }
                    String type;
                    if (lc.stopping()) {
                        type = "release";  // not processed: back to the group
                    } else {
                        lc.sleepUntil(System.nanoTime() + processingMs * 1_000_000L);
                        type = decide(Payload.decode(r.value()), poisonEvery, release, reject, noAck,
                                random.nextDouble());
                    }
                    if (type.equals("none")) {
                        held.add(k);
                    } else {
                        acknowledge(r, ids[k], type);
                    }
                }
                if (explicit) {
                    commit(commitTimeout);
                    if (!held.isEmpty()) {  // their locks time out first; then released (explicit mode needs it)
                        lc.sleepUntil(now + (lockMs + NO_ACK_MARGIN_MS) * 1_000_000L);
                        for (int k : held) {
                            acknowledge(records.get(k), ids[k], "release");
                        }
                        commit(commitTimeout);
                    }
                }
            }
            if (System.nanoTime() - lastProgress > 500_000_000L) {
                writeProgress(false);
                lastProgress = System.nanoTime();
            }
        }
        Log.info("stopping (" + lc.reason() + "): " + delivered + " deliveries in " + polls + " polls");
        Duration timeout = Duration.ofMillis((long) (lc.closeTimeoutS(CLOSE_TIMEOUT_S) * 1000));
        try {
            commit(timeout);  // implicit: accepts the last batch; explicit: anything not committed yet
            lc.blocking(true);
            consumer.close(timeout);
        } catch (KafkaException e) {
            Log.warn("close: " + e);
        } finally {
            lc.blocking(false);
        }
        for (Pending p : new ArrayList<>(pending.values())) {
            ackResult(p, new IllegalStateException("no result before the consumer closed"));
        }
        pending.clear();
        member("stop");
        deliveries.close();
        acks.close();
        members.close();
        writeProgress(true);
        lc.finished();
        return 0;
    }
}
