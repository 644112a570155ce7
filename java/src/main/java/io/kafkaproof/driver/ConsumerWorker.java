package io.kafkaproof.driver;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Recording consumer, the Java twin of workload.run_consumer.
 *
 * <p>Reads are written (and handed to the OS) after every poll and before the commit that
 * follows it, so the ledger never claims less than was processed; {@code commit=before} commits
 * first, then sleeps {@code processing_ms}, then records, which is its point. Commits name the
 * offsets the driver tracked (last read offset + 1 per partition). With {@code commit=auto} the
 * client commits inside poll() and close(); a consumer interceptor records those commits.
 */
final class ConsumerWorker {
    static final List<String> OWNED = List.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, ConsumerConfig.GROUP_ID_CONFIG,
        ConsumerConfig.ISOLATION_LEVEL_CONFIG, ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
        ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG);
    static final double CLOSE_TIMEOUT_S = 5;
    static final Set<String> STRATEGIES = Set.of("auto", "sync", "async", "before");

    /** The running worker, for {@link CommitInterceptor} (one worker per JVM). */
    static volatile ConsumerWorker current;

    private final Spec spec;
    private final Lifecycle lc;
    private final int index;
    private final int incarnation;
    private final String strategy;
    private final boolean assignMode;
    private final Notifier notifier;
    private ConsumerStreams streams;
    private Progress progress;
    private KafkaConsumer<byte[], byte[]> consumer;
    private int generation = -1;
    // Next offset to commit per partition: last offset read + 1.
    private final Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();
    private long read;
    private long polls;
    private long rebalances;
    private long commits;
    private long commitErrors;
    private final Map<String, Long> positions = new TreeMap<>();

    ConsumerWorker(Spec spec, Lifecycle lc) {
        this.spec = spec;
        this.lc = lc;
        this.index = (int) spec.lng("index");
        this.incarnation = (int) spec.lng("incarnation", 0);
        this.strategy = spec.str("commit", "sync");
        if (!STRATEGIES.contains(strategy)) {
            throw new Spec.SpecException("commit: unknown strategy '" + strategy + "'; allowed: auto, sync, async, before");
        }
        this.assignMode = "assign".equals(spec.str("mode", "subscribe"));
        this.notifier = new Notifier(spec.str("notify", null));
    }

    /** Properties the consumer is created with: defaults, the cluster's connection, the scenario's config, then what the driver owns. */
    static Properties properties(Spec spec) {
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (spec.has("batch")) {
            p.setProperty(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Long.toString(spec.lng("batch", 500)));
        }
        p.putAll(Spec.clientProperties(spec.sub("config"), OWNED, "config"));
        String strategy = spec.str("commit", "sync");
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap"));
        String group = spec.str("group", "");
        if (!group.isEmpty()) {
            p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, spec.str("isolation_level", "read_committed"));
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, Boolean.toString("auto".equals(strategy)));
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if ("auto".equals(strategy)) {
            String mine = CommitInterceptor.class.getName();
            String other = p.getProperty(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, "").trim();
            p.setProperty(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, other.isEmpty() ? mine : other + "," + mine);
        }
        return p;
    }

    private void event(String name, int[] parts, long[] offsets, Boolean success, String error) {
        streams.event(name, parts, offsets, success, error);
    }

    private void commitEvent(Map<TopicPartition, OffsetAndMetadata> offsets, Exception error) {
        List<Map.Entry<TopicPartition, OffsetAndMetadata>> sorted = new ArrayList<>(offsets.entrySet());
        sorted.sort((a, b) -> Integer.compare(a.getKey().partition(), b.getKey().partition()));
        int[] parts = new int[sorted.size()];
        long[] offs = new long[sorted.size()];
        for (int k = 0; k < parts.length; k++) {
            parts[k] = sorted.get(k).getKey().partition();
            offs[k] = sorted.get(k).getValue().offset();
        }
        boolean okCommit = error == null;
        if (okCommit) {
            commits++;
        } else {
            commitErrors++;
        }
        event("commit", parts, offs, okCommit, error == null ? null : error.getClass().getSimpleName() + ": " + error.getMessage());
        if (okCommit) {
            notifier.send("{\"consumer\":" + index + ",\"incarnation\":" + incarnation
                    + ",\"event\":\"commit\",\"ts_ns\":" + System.nanoTime() + "}");
        }
    }

    /** Called by {@link CommitInterceptor} for commits the client made by itself (commit=auto). */
    void autoCommitted(Map<TopicPartition, OffsetAndMetadata> offsets) {
        if ("auto".equals(strategy) && streams != null) {
            commitEvent(offsets, null);
        }
    }

    private void commit(String how, Duration timeout) {
        if (consumed.isEmpty()) {
            return;  // nothing read yet: nothing to commit (the Python worker skips _NO_OFFSET too)
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>(consumed);
        if ("async".equals(how)) {
            consumer.commitAsync(offsets, (committed, e) -> commitEvent(offsets, e));
            return;
        }
        lc.blocking(true);  // a stop request interrupts a commit that waits for a coordinator that is gone
        try {
            if (timeout == null) {
                consumer.commitSync(offsets);
            } else {
                consumer.commitSync(offsets, timeout);
            }
            commitEvent(offsets, null);
        } catch (KafkaException e) {
            // CommitFailedException, RebalanceInProgressException, TimeoutException, InterruptException...: recorded
            commitEvent(offsets, e);
        } finally {
            lc.blocking(false);
        }
    }

    private void track(ConsumerRecords<byte[], byte[]> batch) {
        for (TopicPartition tp : batch.partitions()) {
            List<ConsumerRecord<byte[], byte[]>> rs = batch.records(tp);
            consumed.put(tp, new OffsetAndMetadata(rs.get(rs.size() - 1).offset() + 1));
        }
    }

    private void record(ConsumerRecords<byte[], byte[]> batch, long now, long pollId) throws IOException {
        read += streams.record(batch, now, pollId, generation);  // on disk before the commit that follows
    }

    private void sleepProcessing(long ms) {
        lc.sleepUntil(System.nanoTime() + ms * 1_000_000L);
    }

    private void updatePositions() {
        positions.clear();
        for (TopicPartition tp : consumer.assignment()) {
            try {
                positions.put(Integer.toString(tp.partition()), consumer.position(tp, Duration.ofMillis(100)));
            } catch (KafkaException e) {
                // no position yet (offset fetch under a fault): left out, as the Python worker does
            }
        }
    }

    private void writeProgress(boolean done) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"read\":").append(read).append(",\"polls\":").append(polls).append(",\"rebalances\":")
                .append(rebalances).append(",\"commits\":").append(commits).append(",\"commit_errors\":")
                .append(commitErrors).append(',');
        Progress.counts(b, "positions", positions);
        b.append(",\"client\":\"java\"");
        progress.publish(b, done);
    }

    private final class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            streams.rebalanced("revoke", parts);
            for (TopicPartition tp : parts) {
                consumed.remove(tp);
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            generation = consumer.groupMetadata().generationId();
            rebalances++;
            streams.rebalanced("assign", parts);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            streams.rebalanced("lost", parts);
            for (TopicPartition tp : parts) {
                consumed.remove(tp);
            }
        }
    }

    /** Consumes until told to stop; returns the exit code. */
    int run() throws IOException {
        Path out = Path.of(spec.str("out"));
        streams = new ConsumerStreams(out, index, incarnation);
        progress = new Progress(out.resolve("consumer-" + index + "-" + incarnation + ".progress.json"));
        current = this;
        lc.onTick(() -> {
            try {
                streams.flush();
            } catch (IOException e) {
                Log.warn("could not write a stream: " + e);
            }
        });
        long processingMs = (long) spec.dbl("processing_ms", 0);
        String topic = spec.str("topic");

        consumer = new KafkaConsumer<>(properties(spec));
        event("start", new int[0], null, null, null);
        if (assignMode) {
            List<TopicPartition> parts = new ArrayList<>();
            for (Object p : spec.list("partitions")) {
                parts.add(new TopicPartition(topic, ((Number) p).intValue()));
            }
            consumer.assign(parts);
            streams.assigned(ConsumerStreams.partitions(parts));
        } else {
            consumer.subscribe(List.of(topic), new Listener());
        }
        writeProgress(false);

        long pollId = 0;
        long lastProgress = 0;
        while (!lc.stopping()) {
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
            long now = System.nanoTime();
            polls++;
            if (!assignMode) {
                generation = consumer.groupMetadata().generationId();
            }
            if (!batch.isEmpty()) {
                pollId++;
                if ("before".equals(strategy)) {
                    track(batch);
                    commit("sync", null);
                    sleepProcessing(processingMs);
                    record(batch, now, pollId);
                } else {
                    record(batch, now, pollId);
                    track(batch);
                    sleepProcessing(processingMs);
                    if (!"auto".equals(strategy)) {
                        commit(strategy, null);
                    }
                }
            }
            if (System.nanoTime() - lastProgress > 500_000_000L) {
                updatePositions();
                writeProgress(false);
                lastProgress = System.nanoTime();
            }
        }
        Log.info("stopping (" + lc.reason() + "): read " + read + " records in " + pollId + " polls");
        lc.blocking(true);
        try {
            Duration timeout = Duration.ofMillis((long) (lc.closeTimeoutS(CLOSE_TIMEOUT_S) * 1000));
            if (!"auto".equals(strategy)) {
                commit("async".equals(strategy) ? "async" : "sync", timeout);
            }
            consumer.close(timeout);  // auto: commits here; async: waits for pending commits
        } catch (KafkaException e) {
            event("commit", new int[0], null, false, "on close: " + e.getClass().getSimpleName() + ": " + e.getMessage());
        } finally {
            lc.blocking(false);
        }
        event("exit", new int[0], null, null, null);
        streams.close();
        writeProgress(true);
        lc.finished();
        return 0;
    }
}
