package io.kafkaproof.driver;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Open-loop recording producer, the Java twin of workload.run_producer.
 *
 * <p>Value {@code seq} is intended at {@code t0 + seq/rate}; the producer never waits for acks,
 * so a blocking send() (metadata, a full buffer) shows as {@code send_ns - intended_ns}.
 * Every send is one row of {@code producer-<i>.sends.tsv} (written before send() is called, so
 * a completion row is never on disk without its send row), every callback one row of
 * {@code .completions.tsv}, every transaction one row of {@code .txns.tsv}.
 */
final class ProducerWorker {
    private static final List<String> OWNED = List.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
        ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG);
    private static final int BUFFER = 1 << 20;

    // Staged rows: sends (value_id, seq, intended_ns, send_ns, txn_id | key) and completions
    // (value_id, complete_ns, partition, offset, error_code | error_name, outcome, error_message).
    private static final int SEND_LONGS = 5;
    private static final int SEND_REFS = 1;
    private static final int DONE_LONGS = 5;
    private static final int DONE_REFS = 3;
    private static final int STAGED_ROWS = 16384;

    private final Spec spec;
    private final int index;
    private final String runId;
    private final Path out;
    private final Thread mainThread = Thread.currentThread();
    private final Lifecycle lc;
    private final Notifier notifier;
    private Tsv sends;
    private Tsv completions;
    private final Rows sendRows = new Rows(SEND_LONGS, SEND_REFS, STAGED_ROWS);
    private final Rows doneRows = new Rows(DONE_LONGS, DONE_REFS, STAGED_ROWS);
    private final Object flushLock = new Object();
    private int pid;
    private Tsv txns;
    private Progress progress;
    private Classifier classifier;
    private boolean offsetsFromBroker;
    private KafkaProducer<byte[], byte[]> producer;

    // Set and read by the main thread only: a callback run inside send() means "never sent".
    private boolean inSend;
    private volatile long sent;
    // Guarded by `doneRows`.
    private long ok;
    private long fail;
    private long indefinite;
    private final Map<String, Long> errors = new TreeMap<>();
    private String fatal;

    ProducerWorker(Spec spec, Lifecycle lc) {
        this.spec = spec;
        this.lc = lc;
        this.index = (int) spec.lng("index");
        this.runId = spec.str("run_id");
        this.out = Path.of(spec.str("out"));
        this.notifier = new Notifier(spec.str("notify", null));
    }

    /** Properties the producer is created with: the cluster's connection, the scenario's config, then what the driver owns. */
    static Properties properties(Spec spec, int index) {
        Properties p = Spec.clientProperties(spec.sub("config"), OWNED, "config");
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap"));
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (spec.has("transactions") && !p.containsKey(ProducerConfig.TRANSACTIONAL_ID_CONFIG)) {
            p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "kp-" + spec.str("run_id") + "-p" + index);
        }
        return p;
    }

    private final class Done implements Callback {
        private final long vid;

        Done(long vid) {
            this.vid = vid;
        }

        @Override
        public void onCompletion(RecordMetadata md, Exception e) {
            complete(vid, md, e, inSend && Thread.currentThread() == mainThread);
        }
    }

    private static int partitionOf(RecordMetadata md) {
        if (md == null) {
            return -1;
        }
        try {
            return md.partition();
        } catch (NullPointerException e) {
            return -1;  // send() failed before a partition was chosen: RecordMetadata without a TopicPartition
        }
    }

    private void complete(long vid, RecordMetadata md, Throwable e, boolean beforeSend) {
        long now = System.nanoTime();
        int part = partitionOf(md);
        if (e == null) {
            long off = md == null ? -1 : md.offset();
            boolean noOffset = off < 0 || !offsetsFromBroker;  // acks=0: RecordMetadata has offset -1
            synchronized (doneRows) {
                ok++;
                int r = doneRows.add();
                long[] l = doneRows.l;
                int b = r * DONE_LONGS;
                l[b] = vid;
                l[b + 1] = now;
                l[b + 2] = part;
                l[b + 3] = noOffset ? Rows.NULL : off;
                l[b + 4] = Rows.NULL;
                Object[] o = doneRows.o;
                int c = r * DONE_REFS;
                o[c] = null;
                o[c + 1] = Classifier.OK;
                o[c + 2] = null;
            }
            return;
        }
        String outcome = classifier.classify(e, beforeSend);
        long code = e instanceof ApiException ? Errors.forException(e).code() : Rows.NULL;
        String name = e.getClass().getSimpleName();
        synchronized (doneRows) {
            if (outcome.equals(Classifier.FAIL)) {
                fail++;
            } else {
                indefinite++;
            }
            errors.merge(name, 1L, Long::sum);
            int r = doneRows.add();
            long[] l = doneRows.l;
            int b = r * DONE_LONGS;
            l[b] = vid;
            l[b + 1] = now;
            l[b + 2] = part;
            l[b + 3] = Rows.NULL;
            l[b + 4] = code;
            Object[] o = doneRows.o;
            int c = r * DONE_REFS;
            o[c] = name;
            o[c + 1] = outcome;
            o[c + 2] = e.getMessage();
        }
    }

    private long completed() {
        synchronized (doneRows) {
            return ok + fail + indefinite;
        }
    }

    private String progressJson(boolean done) {
        StringBuilder b = new StringBuilder(256);
        long s = sent;
        synchronized (doneRows) {
            b.append("{\"sent\":").append(s).append(",\"ok\":").append(ok).append(",\"fail\":").append(fail)
                    .append(",\"indefinite\":").append(indefinite).append(',');
            Progress.counts(b, "errors", errors);
            b.append(",\"client\":\"java\"");
            if (done) {
                b.append(",\"done\":true,\"unfinished\":").append(s - (ok + fail + indefinite));
            }
        }
        return b.append('}').toString();
    }

    /**
     * Formats the staged rows and hands them to the OS. Completions are taken before sends and
     * written after them: a completion on disk always has its send row (staged before send()) on disk.
     */
    private void flushAll() {
        synchronized (flushLock) {
            Rows.Batch done = doneRows.drain();
            Rows.Batch sent = sendRows.drain();
            try {
                synchronized (sends) {
                    long[] l = sent.l;
                    Object[] o = sent.o;
                    for (int r = 0; r < sent.rows; r++) {
                        int b = r * SEND_LONGS;
                        sends.l(l[b]).l(index).l(pid).l(l[b + 1]).s((String) o[r * SEND_REFS]).l(l[b + 2])
                                .l(l[b + 3]).ln(l[b + 4]).end();
                    }
                }
                sendRows.recycle(sent);
                sends.flush();
                synchronized (completions) {
                    long[] l = done.l;
                    Object[] o = done.o;
                    for (int r = 0; r < done.rows; r++) {
                        int b = r * DONE_LONGS;
                        int c = r * DONE_REFS;
                        completions.l(l[b]).l(l[b + 1]).l(l[b + 2]).ln(l[b + 3]).ln(l[b + 4]).s((String) o[c])
                                .s((String) o[c + 1]).s((String) o[c + 2]).end();
                    }
                }
                doneRows.recycle(done);
                completions.flush();
                txns.flush();
            } catch (IOException e) {
                Log.warn("could not write a stream: " + e);
            }
        }
    }

    /** Runs the producer to the end; returns the exit code. */
    int run() throws IOException {
        String prefix = "producer-" + index;
        sends = new Tsv(out.resolve(prefix + ".sends.tsv"), BUFFER);
        completions = new Tsv(out.resolve(prefix + ".completions.tsv"), BUFFER);
        txns = new Tsv(out.resolve(prefix + ".txns.tsv"), 4096);
        progress = new Progress(out.resolve(prefix + ".progress.json"));
        progress.write(progressJson(false));

        Properties props = properties(spec, index);
        classifier = new Classifier(parseLong(props.getProperty(ProducerConfig.RETRIES_CONFIG), Integer.MAX_VALUE));
        offsetsFromBroker = spec.bool("offsets_from_broker", true);
        Spec txn = spec.sub("transactions");
        long txnBatch = txn == null ? 0 : txn.lng("batch");
        if (txn != null && txnBatch < 1) {
            throw new Spec.SpecException("transactions.batch must be at least 1");
        }
        double abortP = txn == null ? 0 : txn.dbl("abort_probability", 0);
        boolean flushBeforeAbort = txn == null || !"purge".equals(txn.str("abort", "flush"));

        final int[] tick = {0};
        lc.onTick(() -> {
            flushAll();
            if (++tick[0] % 2 == 0) {
                progress.write(progressJson(false));
            }
        });

        String topic = spec.str("topic");
        pid = (int) ProcessHandle.current().pid();
        Random rng = new Random(spec.lng("seed", 0) * 1000 + index);
        KeyChooser keys = new KeyChooser(spec.sub("keys"));
        Payload payload = new Payload(runId, (int) spec.lng("value_size", 100));
        double rate = spec.dbl("rate", 0);
        long messages = spec.lng("messages", -1);
        long durationNs = spec.has("duration_s") ? (long) (spec.dbl("duration_s", 0) * 1e9) : -1;

        producer = new KafkaProducer<>(props);
        long txnId = -1;
        if (txn != null) {
            lc.blocking(true);
            try {
                producer.initTransactions();
            } catch (KafkaException e) {
                fatal = "initTransactions failed: " + e;
            } finally {
                lc.blocking(false);
            }
        }

        long t0 = System.nanoTime();
        long seq = 0;
        while (!lc.stopping() && fatal == null) {
            if (messages >= 0 && seq >= messages) {
                break;
            }
            long now = System.nanoTime();
            if (durationNs >= 0 && now - t0 >= durationNs) {
                break;
            }
            long intended = now;
            if (rate > 0) {
                intended = t0 + (long) (seq * 1e9 / rate);
                long delay = intended - now;
                if (delay > 0) {
                    LockSupport.parkNanos(Math.min(delay, TimeUnit.MILLISECONDS.toNanos(50)));
                    continue;
                }
            }
            if (txn != null && txnId < 0) {
                try {
                    producer.beginTransaction();
                } catch (KafkaException e) {
                    fatal = "beginTransaction failed: " + e;
                    break;
                }
                txnId = seq / txnBatch;
            }
            long vid = Payload.valueId(index, seq);
            String key = keys.choose(seq, rng);
            byte[] value = payload.encode(vid);
            long sendNs = System.nanoTime();
            synchronized (sendRows) {
                int r = sendRows.add();
                long[] l = sendRows.l;
                int b = r * SEND_LONGS;
                l[b] = vid;
                l[b + 1] = seq;
                l[b + 2] = intended;
                l[b + 3] = sendNs;
                l[b + 4] = txnId < 0 ? Rows.NULL : txnId;
                sendRows.o[r * SEND_REFS] = key;
            }
            sent = seq + 1;
            ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic,
                    key == null ? null : key.getBytes(StandardCharsets.UTF_8), value);
            inSend = true;
            lc.blocking(true);
            try {
                producer.send(record, new Done(vid));
            } catch (KafkaException | IllegalStateException e) {
                // Thrown by send() itself (serialization, interrupted while waiting, closed, a transactional
                // error state): the record never entered the producer's buffer.
                complete(vid, null, e, true);
            } finally {
                lc.blocking(false);
                inSend = false;
            }
            seq++;
            if (txn != null && seq % txnBatch == 0) {
                endTransaction(rng.nextDouble() < abortP, txnId, flushBeforeAbort);
                txnId = -1;
            }
        }
        if (txn != null && txnId >= 0 && fatal == null) {
            endTransaction(rng.nextDouble() < abortP, txnId, flushBeforeAbort);
        }
        flushAll();
        double closeTimeoutS = spec.dbl("close_timeout_s", 10);
        if (!lc.stopping()) {
            double flushTimeoutS = spec.dbl("flush_timeout_s", 120);
            lc.armWatchdog(flushTimeoutS + closeTimeoutS + Lifecycle.HARD_EXIT_AFTER_S, "the final flush and close");
            long deadline = System.nanoTime() + (long) (flushTimeoutS * 1e9);
            while (completed() < sent && !lc.stopping() && System.nanoTime() < deadline) {
                LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
            }
        }
        lc.blocking(true);
        try {
            // Records still unacknowledged when the timeout ends fail with "Producer is closed forcefully.": indefinite.
            producer.close(Duration.ofMillis((long) (lc.closeTimeoutS(closeTimeoutS) * 1000)));
        } catch (InterruptException e) {
            Log.warn("close interrupted: " + e.getMessage());
        } finally {
            lc.blocking(false);
        }
        flushAll();
        sends.close();
        completions.close();
        txns.close();
        progress.finish(progressJson(true));
        lc.finished();
        long unfinished = sent - completed();
        Log.info("sent " + sent + ", completed " + completed() + (unfinished > 0 ? ", unfinished " + unfinished : "")
                + (lc.stopping() ? " (stopped: " + lc.reason() + ")" : ""));
        if (fatal != null) {
            Log.error(fatal);
            return 1;
        }
        return 0;
    }

    private static long parseLong(String v, long dflt) {
        if (v == null) {
            return dflt;
        }
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            return dflt;
        }
    }

    /**
     * Commits or aborts transaction {@code txnId} and records its outcome (null: unknown).
     * A commit that times out is retried (the Java client's contract: the commit may still be in
     * progress, so aborting is not allowed) until it succeeds, fails otherwise, or the worker stops.
     * A commit that fails otherwise is aborted; a producer whose transaction outcome is unknown
     * cannot go on, and the worker ends with an error.
     */
    private void endTransaction(boolean abort, long txnId, boolean flushBeforeAbort) {
        String outcome = null;
        KafkaException err = null;
        lc.blocking(true);
        try {
            if (abort) {
                if (flushBeforeAbort) {
                    // Write the records first, so the abort marker really rolls back records in the log
                    // (aborting while they are queued fails them unsent: read_committed would never be tested).
                    producer.flush();
                }
                retryOnTimeout(producer::abortTransaction);
                outcome = "abort";
            } else {
                retryOnTimeout(producer::commitTransaction);
                outcome = "commit";
            }
        } catch (KafkaException e) {
            err = e;
            Log.warn("transaction " + txnId + " did not " + (abort ? "abort" : "commit") + ": " + e);
            if (!abort && !(e instanceof TimeoutException) && !(e instanceof InterruptException)) {
                try {
                    retryOnTimeout(producer::abortTransaction);
                    outcome = "abort";
                } catch (KafkaException e2) {
                    Log.warn("transaction " + txnId + " could not be aborted either: " + e2);
                }
            }
        } finally {
            lc.blocking(false);
        }
        synchronized (txns) {
            txns.l(index).l(txnId).s(outcome).end();
        }
        StringBuilder n = new StringBuilder(96).append("{\"producer\":").append(index)
                .append(",\"event\":\"txn\",\"txn_id\":").append(txnId).append(",\"txn_outcome\":");
        if (outcome == null) {
            n.append("null");
        } else {
            Json.quote(n, outcome);
        }
        notifier.send(n.append(",\"ts_ns\":").append(System.nanoTime()).append('}').toString());
        if (outcome == null && fatal == null && !lc.stopping()) {
            fatal = "transaction " + txnId + ": outcome unknown after " + err + "; the producer cannot go on";
        }
    }

    private void retryOnTimeout(Runnable call) {
        while (true) {
            try {
                call.run();
                return;
            } catch (TimeoutException e) {
                if (lc.stopping()) {
                    throw e;
                }
                Log.warn("transaction call timed out, retrying: " + e.getMessage());
            }
        }
    }
}
