package io.kafkaproof.driver;

import java.io.Closeable;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Collection;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;

/**
 * A group consumer's two streams, {@code consumer-<i>-<inc>.reads.tsv} and {@code .events.tsv} (the ledger's
 * READS and CONSUMER_EVENTS), and the assignment its rebalance events leave: what {@link ConsumerWorker} and
 * {@link CopierWorker} (which reads its input as a consumer) both write.
 */
final class ConsumerStreams implements Closeable {
    final Tsv reads;
    final Tsv events;
    private final int index;
    private final int incarnation;
    private final int pid = (int) ProcessHandle.current().pid();
    // The whole assignment after the last rebalance event (a cooperative rebalance names only what moves).
    private int[] assigned = new int[0];

    ConsumerStreams(Path out, int index, int incarnation) throws IOException {
        String prefix = "consumer-" + index + "-" + incarnation;
        this.reads = new Tsv(out.resolve(prefix + ".reads.tsv"), 1 << 18);
        this.events = new Tsv(out.resolve(prefix + ".events.tsv"), 4096);
        this.index = index;
        this.incarnation = incarnation;
    }

    /** The partitions of {@code parts}, sorted. */
    static int[] partitions(Collection<TopicPartition> parts) {
        int[] a = new int[parts.size()];
        int k = 0;
        for (TopicPartition tp : parts) {
            a[k++] = tp.partition();
        }
        java.util.Arrays.sort(a);
        return a;
    }

    /**
     * The whole assignment (sorted) after a rebalance event ({@code assign}, {@code revoke} or {@code lost})
     * naming {@code parts}. The listener hears every partition that leaves (an eager rebalance revokes all
     * before it assigns the new set), so an assign adds to what is kept and a revoke or loss removes.
     */
    static int[] assignmentAfter(int[] current, String event, int[] parts) {
        boolean assign = "assign".equals(event);
        if (!assign && !"revoke".equals(event) && !"lost".equals(event)) {
            throw new IllegalArgumentException("not a rebalance event: " + event + " (assign, revoke or lost)");
        }
        TreeSet<Integer> after = new TreeSet<>();
        for (int p : current) {
            after.add(p);
        }
        for (int p : parts) {
            if (assign) {
                after.add(p);
            } else {
                after.remove(p);
            }
        }
        return after.stream().mapToInt(Integer::intValue).toArray();
    }

    /** The assignment after the last rebalance event (or {@link #assigned(int[])}). */
    int[] assigned() {
        return assigned;
    }

    /** Sets the assignment (assign mode) and records it as an {@code assign} event. */
    void assigned(int[] parts) {
        assigned = parts;
        event("assign", parts, null, null, null, parts);
    }

    /** Records a rebalance event ({@code assign}, {@code revoke}, {@code lost}) with the assignment it leaves. */
    void rebalanced(String name, Collection<TopicPartition> parts) {
        int[] ps = partitions(parts);
        assigned = assignmentAfter(assigned, name, ps);
        event(name, ps, null, null, null, assigned);
    }

    /** Records one consumer event without an assignment. */
    void event(String name, int[] parts, long[] offsets, Boolean success, String error) {
        event(name, parts, offsets, success, error, null);
    }

    /** Records one consumer event and hands it to the OS at once (events are few and precious). */
    void event(String name, int[] parts, long[] offsets, Boolean success, String error, int[] after) {
        synchronized (events) {
            events.l(index).l(pid).l(incarnation).l(System.nanoTime()).s(name).ints(parts).longs(offsets)
                    .b(success).s(error).ints(after).end();
        }
        try {
            events.flush();
        } catch (IOException e) {
            Log.warn("could not write an event: " + e);
        }
    }

    /**
     * Records one poll's records read at {@code now} (poll {@code pollId}, group generation {@code generation})
     * in the client's order and hands them to the OS before the caller commits anything; returns their count.
     */
    int record(ConsumerRecords<byte[], byte[]> batch, long now, long pollId, int generation) throws IOException {
        int seq = 0;
        synchronized (reads) {
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                byte[] key = r.key();
                reads.l(index).l(pid).l(incarnation).l(generation).l(r.partition()).l(r.offset())
                        .s(key == null ? null : new String(key, StandardCharsets.UTF_8))
                        .l(Payload.decode(r.value())).l(now).l(pollId).l(seq++).end();  // seq: the client's order
            }
        }
        reads.flush();
        return seq;
    }

    /** Hands both streams' rows to the OS (the ticker's periodic flush). */
    void flush() throws IOException {
        reads.flush();
        events.flush();
    }

    @Override
    public void close() throws IOException {
        reads.close();
        events.close();
    }
}
