package io.kafkaproof.driver;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * An exactly-once read-process-write copier, the Java twin of run/copier.py's {@code run_copier}.
 *
 * <p>Consumes the input topic in the group and, per poll (at most {@code batch_size} records): begins a
 * transaction, produces one output per input (its value kept, so its value id; the key carries the
 * transaction, {@link #outputKey}), {@code sendOffsetsToTransaction} with the group's metadata, then commits,
 * or aborts with {@code abort_probability} and seeks back to copy the batch again. It starts with
 * {@code initTransactions()} under the copier's fixed {@code transactional.id}, which aborts what its previous
 * incarnation left open and fences that incarnation; when it is fenced itself (or its producer is in a fatal
 * state) it exits {@link #EXIT_FENCED} and the run starts it again.
 *
 * <p>Streams (the same columns as the librdkafka copier's Arrow streams; copier_run.py assembles both):
 * {@code copier-<i>-<inc>.txns.tsv} (TRANSACTIONS: a row when a transaction begins, outcome indefinite, and
 * one when it ends), {@code .records.tsv} (TRANSACTION_RECORDS: inputs when produced, outputs when acked),
 * {@code .offsets.tsv} (PIPELINE_PARTITIONS: what each committed transaction committed), and the input's reads
 * and group events as a consumer's ({@link ConsumerStreams}). The progress file's {@code positions} are the
 * group's committed offsets of the assigned partitions: the run's settle phase waits for them.
 */
final class CopierWorker {
    /** Fenced, or a transactional error the producer cannot recover from: the run restarts the copier. */
    static final int EXIT_FENCED = 4;
    static final int TXN_COPIER_SHIFT = 40;
    static final int TXN_INCARNATION_SHIFT = 24;
    static final int COMMIT_RETRIES = 5;
    static final int ABORT_RETRIES = 3;
    static final double CLOSE_TIMEOUT_S = 5;
    private static final List<String> PRODUCER_OWNED = List.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
        ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG,
        ProducerConfig.TRANSACTIONAL_ID_CONFIG);

    private final Spec spec;
    private final Spec pipe;
    private final Lifecycle lc;
    private final int index;
    private final int incarnation;
    private final String transactionalId;
    private final String outputTopic;
    private final boolean ordered;
    private final double abortProbability;
    private final Notifier notifier;
    private final Random rng;
    private ConsumerStreams streams;
    private Tsv txns;
    private Tsv records;
    private Tsv offsets;
    private Progress progress;
    private KafkaConsumer<byte[], byte[]> consumer;
    private KafkaProducer<byte[], byte[]> producer;
    private int generation = -1;
    private long read;
    private long committed;
    private long aborted;
    private long indefinite;
    private final Map<String, Long> errors = new TreeMap<>();
    private final Map<String, Long> positions = new TreeMap<>();

    CopierWorker(Spec spec, Lifecycle lc) {
        this.spec = spec;
        this.lc = lc;
        this.pipe = spec.sub("pipeline");
        if (pipe == null) {
            throw new Spec.SpecException("a copier's spec needs its pipeline section (field 'pipeline')");
        }
        this.index = (int) spec.lng("index");
        this.incarnation = (int) spec.lng("incarnation", 0);
        this.transactionalId = pipe.str("transactional_id_prefix") + "-" + index;  // spec.copier.transactional_id
        this.outputTopic = pipe.str("output_topic");
        this.ordered = pipe.bool("ordered_output", true);
        this.abortProbability = pipe.dbl("abort_probability", 0);
        this.notifier = new Notifier(spec.str("notify", null));
        this.rng = new Random((spec.str("run_id") + "-" + index + "-" + incarnation).hashCode());
    }

    /** The run-unique number of copier {@code copier}'s {@code seq}-th transaction in incarnation {@code inc}. */
    static long txnNumber(int copier, int inc, long seq) {
        return ((long) copier << TXN_COPIER_SHIFT) | ((long) inc << TXN_INCARNATION_SHIFT) | seq;
    }

    /** An output's key: its input's key and the transaction that wrote it (run/copier.py's output_key). */
    static byte[] outputKey(byte[] inputKey, long txn) {
        byte[] tail = ("|" + txn).getBytes(StandardCharsets.UTF_8);
        byte[] head = inputKey == null ? new byte[0] : inputKey;
        byte[] out = new byte[head.length + tail.length];
        System.arraycopy(head, 0, out, 0, head.length);
        System.arraycopy(tail, 0, out, head.length, tail.length);
        return out;
    }

    /** The copier's producer: transactional, idempotent, acks=all, with the pipeline's producer_config over that. */
    static Properties producerProperties(Spec spec, String transactionalId) {
        Spec pipe = spec.sub("pipeline");
        Properties p = new Properties();
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.setProperty(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");  // librdkafka copier's transaction call timeout
        p.setProperty(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Long.toString(pipe.lng("transaction_timeout_ms", 10_000)));
        p.putAll(Spec.clientProperties(pipe.sub("producer_config"), PRODUCER_OWNED, "pipeline.producer_config"));
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap"));
        p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    /** The copier's consumer: a group consumer's ({@link ConsumerWorker#properties}), a batch per poll, no auto commit. */
    static Properties consumerProperties(Spec spec) {
        Properties p = ConsumerWorker.properties(spec);
        p.setProperty(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Long.toString(spec.sub("pipeline").lng("batch_size", 50)));
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.remove(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG);
        return p;
    }

    /**
     * The producer id and epoch the producer holds now, {@code {id, epoch}}, read by reflection (kafka-clients
     * has no API for them; under transactions v2 the epoch grows with every transaction); null when this
     * client version keeps them elsewhere.
     */
    static long[] producerIdAndEpoch(KafkaProducer<?, ?> p) {
        try {
            Field f = KafkaProducer.class.getDeclaredField("transactionManager");
            f.setAccessible(true);
            Object tm = f.get(p);
            if (tm == null) {
                return null;
            }
            Method m = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
            m.setAccessible(true);
            Object pe = m.invoke(tm);
            return new long[] {pe.getClass().getField("producerId").getLong(pe),
                pe.getClass().getField("epoch").getShort(pe)};
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    private void error(Throwable e) {
        String name = e.getClass().getSimpleName();
        synchronized (errors) {
            errors.merge(name, 1L, Long::sum);
        }
    }

    /** One TRANSACTIONS row (the last row of a transaction wins); {@code commit}, {@code end} may be null. */
    private void txnRow(long txn, long seq, String outcome, long[] pe, long begin, Long commit, Long end)
            throws IOException {
        synchronized (txns) {
            txns.l(txn).s(transactionalId).l(index);
            if (pe == null || pe[0] < 0) {
                txns.nul().nul();
            } else {
                txns.l(pe[0]).l(pe[1]);
            }
            txns.l(seq).s(outcome).l(begin).l(commit == null ? 0 : commit, commit == null)
                    .l(end == null ? 0 : end, end == null).end();
        }
        txns.flush();
    }

    private void writeProgress(boolean done) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"read\":").append(read).append(",\"committed\":").append(committed).append(",\"aborted\":")
                .append(aborted).append(",\"indefinite\":").append(indefinite).append(',');
        synchronized (errors) {
            Progress.counts(b, "errors", errors);
        }
        b.append(',');
        Progress.counts(b, "positions", positions);
        b.append(",\"client\":\"java\"");
        progress.publish(b, done);
    }

    /** The group's committed offsets of the assigned partitions (what the run's settle phase waits for). */
    private void updatePositions() {
        Set<TopicPartition> parts = consumer.assignment();
        if (parts.isEmpty()) {
            return;
        }
        lc.blocking(true);
        try {
            Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(parts, Duration.ofSeconds(2));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : c.entrySet()) {
                if (e.getValue() != null) {
                    positions.put(Integer.toString(e.getKey().partition()), e.getValue().offset());
                }
            }
        } catch (KafkaException e) {
            // the coordinator is moving: the next tick asks again
        } finally {
            lc.blocking(false);
        }
    }

    private final class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            streams.rebalanced("revoke", parts);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            generation = consumer.groupMetadata().generationId();
            streams.rebalanced("assign", parts);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            streams.rebalanced("lost", parts);
        }
    }

    /** Back to each partition's first offset in the batch: an aborted batch is copied again. */
    private void rewind(ConsumerRecords<byte[], byte[]> batch) {
        Set<TopicPartition> mine = consumer.assignment();
        for (TopicPartition tp : batch.partitions()) {
            if (mine.contains(tp)) {  // revoked meanwhile: its next owner starts from the committed offset
                consumer.seek(tp, batch.records(tp).get(0).offset());
            }
        }
    }

    /** Aborts the open transaction; "aborted", or null when the producer cannot (fenced, fatal: exit). */
    private String abort() {
        for (int k = 0; k < ABORT_RETRIES; k++) {
            try {
                producer.abortTransaction();
                return "aborted";
            } catch (TimeoutException e) {
                error(e);  // the coordinator did not answer in max.block.ms: the call may be repeated
            } catch (InterruptException e) {
                return "indefinite";
            } catch (KafkaException | IllegalStateException e) {
                error(e);
                Log.warn("abortTransaction failed: " + e);
                return null;
            }
        }
        return "indefinite";
    }

    /** Commits the open transaction; its outcome ("committed", "aborted", "indefinite") or null (exit). */
    private String commit() {
        for (int k = 0; k < COMMIT_RETRIES; k++) {
            try {
                producer.commitTransaction();
                return "committed";
            } catch (TimeoutException e) {
                error(e);  // commitTransaction may be called again after a timeout: it resumes the commit
            } catch (InterruptException e) {
                return "indefinite";
            } catch (KafkaException e) {
                error(e);
                Log.warn("commitTransaction failed: " + e);
                return abort();
            }
        }
        return "indefinite";
    }

    /**
     * One batch in one transaction; returns false when the copier must exit (fenced or fatal). The input rows
     * are written before the outputs are sent, so an output's row never precedes its input's.
     */
    private boolean copy(ConsumerRecords<byte[], byte[]> batch, long seq, long processingMs) throws IOException {
        long txn = txnNumber(index, incarnation, seq);
        long begin = System.nanoTime();
        long[] pe = producerIdAndEpoch(producer);
        String outcome = "indefinite";
        Long commitNs = null;
        boolean fatal = false;
        lc.blocking(true);
        try {
            producer.beginTransaction();
            txnRow(txn, seq, "indefinite", pe, begin, null, null);
            synchronized (records) {
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    records.l(txn).s("input").l(r.partition()).l(r.offset()).l(Payload.decode(r.value())).end();
                }
            }
            records.flush();
            Map<TopicPartition, OffsetAndMetadata> next = new LinkedHashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                ProducerRecord<byte[], byte[]> out = new ProducerRecord<>(outputTopic, ordered ? r.partition() : null,
                        outputKey(r.key(), txn), r.value());
                long vid = Payload.decode(r.value());
                producer.send(out, (md, e) -> {
                    if (e != null) {
                        error(e);
                        return;
                    }
                    synchronized (records) {
                        records.l(txn).s("output").l(md.partition()).l(md.offset(), !md.hasOffset()).l(vid).end();
                    }
                });
                next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            sleep(processingMs);
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            if (rng.nextDouble() < abortProbability) {
                outcome = abort();
            } else {
                commitNs = System.nanoTime();
                outcome = commit();
            }
            if ("committed".equals(outcome)) {
                synchronized (offsets) {
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                        offsets.l(e.getKey().partition()).l(txn).l(e.getValue().offset()).end();
                    }
                }
                offsets.flush();
                notifier.send("{\"consumer\":" + index + ",\"incarnation\":" + incarnation
                        + ",\"event\":\"commit\",\"ts_ns\":" + System.nanoTime() + "}");
            }
        } catch (InterruptException e) {
            outcome = "indefinite";  // stopped inside a call: the broker's fate for it (the next incarnation aborts it)
        } catch (KafkaException | IllegalStateException e) {
            error(e);
            Log.warn("transaction " + txn + ": " + e);
            outcome = abort();  // e.g. a coordinator moved, a produce failed: abort, copy again
        } finally {
            lc.blocking(false);
        }
        if (outcome == null) {
            fatal = true;
            outcome = "indefinite";
        }
        if ("aborted".equals(outcome) && !fatal) {
            rewind(batch);
        }
        switch (outcome) {
            case "committed":
                committed++;
                break;
            case "aborted":
                aborted++;
                break;
            default:
                indefinite++;
        }
        records.flush();
        txnRow(txn, seq, outcome, pe, begin, commitNs, "indefinite".equals(outcome) ? null : System.nanoTime());
        return !fatal;
    }

    private void sleep(long ms) {
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptException(e);
        }
    }

    /** Copies until told to stop; returns the exit code (0, or {@link #EXIT_FENCED}). */
    int run() throws IOException {
        Path out = Path.of(spec.str("out"));
        String name = "copier-" + index + "-" + incarnation;
        streams = new ConsumerStreams(out, index, incarnation);
        txns = new Tsv(out.resolve(name + ".txns.tsv"), 4096);
        records = new Tsv(out.resolve(name + ".records.tsv"), 1 << 16);
        offsets = new Tsv(out.resolve(name + ".offsets.tsv"), 4096);
        progress = new Progress(out.resolve("consumer-" + index + "-" + incarnation + ".progress.json"));
        lc.onTick(() -> {
            try {
                streams.flush();
                records.flush();
            } catch (IOException e) {
                Log.warn("could not write a stream: " + e);
            }
        });
        long processingMs = (long) spec.dbl("processing_ms", 0);
        consumer = new KafkaConsumer<>(consumerProperties(spec));
        producer = new KafkaProducer<>(producerProperties(spec, transactionalId));
        streams.event("start", new int[0], null, null, null);
        int exit = 0;
        lc.blocking(true);
        try {
            producer.initTransactions();  // aborts the previous incarnation's open transaction, fences it
        } catch (KafkaException e) {
            error(e);
            streams.event("init_transactions", new int[0], null, false, e.getClass().getSimpleName() + ": " + e.getMessage());
            Log.error("initTransactions failed: " + e);
            exit = EXIT_FENCED;
        } finally {
            lc.blocking(false);
        }
        if (exit == 0) {
            consumer.subscribe(List.of(spec.str("topic")), new Listener());
        }
        writeProgress(false);
        long seq = 0;
        long pollId = 0;
        long lastProgress = 0;
        while (exit == 0 && !lc.stopping()) {
            ConsumerRecords<byte[], byte[]> batch;
            try {
                batch = consumer.poll(Duration.ofMillis(200));
            } catch (InterruptException e) {
                break;
            }
            generation = consumer.groupMetadata().generationId();
            if (!batch.isEmpty()) {
                read += streams.record(batch, System.nanoTime(), ++pollId, generation);
                if (!copy(batch, ++seq, processingMs)) {
                    exit = EXIT_FENCED;
                }
            }
            if (System.nanoTime() - lastProgress > 500_000_000L) {
                updatePositions();
                writeProgress(false);
                lastProgress = System.nanoTime();
            }
        }
        Log.info("stopping (" + (exit != 0 ? "fenced or fatal" : lc.reason()) + "): read " + read + ", committed "
                + committed + ", aborted " + aborted + ", indefinite " + indefinite + " transactions");
        if (exit == 0) {
            updatePositions();
        }
        lc.blocking(true);
        try {
            Duration timeout = Duration.ofMillis((long) (lc.closeTimeoutS(CLOSE_TIMEOUT_S) * 1000));
            consumer.close(timeout);
            producer.close(timeout);
        } catch (KafkaException e) {
            Log.warn("close: " + e);
        } finally {
            lc.blocking(false);
        }
        streams.event("exit", new int[0], null, null, null);
        streams.close();
        txns.close();
        records.close();
        offsets.close();
        writeProgress(true);
        lc.finished();
        return exit;
    }
}
