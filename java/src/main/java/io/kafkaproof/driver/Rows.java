package io.kafkaproof.driver;

import java.util.Arrays;

/**
 * Rows staged in memory as raw values (a stride of longs and a stride of object references per
 * row), so the threads on the hot path (the producer's main thread, the client's I/O thread
 * running callbacks) only store a few numbers; the flusher formats them into a {@link Tsv} off
 * the hot path. {@link #NULL} in a long column is a null.
 *
 * <p>Writers fill a row while holding this object's monitor:
 * <pre>synchronized (rows) { int r = rows.add(); rows.l[r * LONGS] = ...; rows.o[r * REFS] = ...; }</pre>
 * {@link #drain} swaps the buffers under the monitor and returns the staged rows.
 */
final class Rows {
    /** The null of a long column (no real value is Long.MIN_VALUE). */
    static final long NULL = Long.MIN_VALUE;

    final int longs;
    final int refs;
    long[] l;
    Object[] o;
    private int n;
    private long[] spareL;
    private Object[] spareO;

    Rows(int longs, int refs, int capacity) {
        this.longs = longs;
        this.refs = refs;
        this.l = new long[longs * capacity];
        this.o = new Object[Math.max(1, refs * capacity)];
        this.spareL = new long[longs * capacity];
        this.spareO = new Object[Math.max(1, refs * capacity)];
    }

    /** Starts a row (caller holds the monitor); returns its index: its longs start at index * longs. */
    int add() {
        if ((n + 1) * longs > l.length) {
            l = Arrays.copyOf(l, l.length * 2);
            o = Arrays.copyOf(o, Math.max(o.length * 2, refs * (n + 1)));
        }
        return n++;
    }

    /** A batch of drained rows: read, then give back with {@link #recycle}. */
    static final class Batch {
        final long[] l;
        final Object[] o;
        final int rows;

        Batch(long[] l, Object[] o, int rows) {
            this.l = l;
            this.o = o;
            this.rows = rows;
        }
    }

    /** Takes every staged row (an empty batch when there are none). */
    synchronized Batch drain() {
        Batch b = new Batch(l, o, n);
        if (n == 0) {
            return b;
        }
        l = spareL != null && spareL.length >= l.length ? spareL : new long[l.length];
        o = spareO != null && spareO.length >= o.length ? spareO : new Object[o.length];
        spareL = null;
        spareO = null;
        n = 0;
        return b;
    }

    /** Gives a drained batch's arrays back for reuse (references cleared so they can be collected). */
    synchronized void recycle(Batch b) {
        if (b.rows == 0) {
            return;
        }
        Arrays.fill(b.o, 0, b.rows * refs, null);
        spareL = b.l;
        spareO = b.o;
    }
}
