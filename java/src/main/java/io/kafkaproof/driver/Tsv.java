package io.kafkaproof.driver;

import java.io.Closeable;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * One append-only stream file: tab-separated rows, {@code \N} for null, lists comma-joined,
 * tabs/newlines inside strings replaced by spaces, no header.
 *
 * <p>Rows are formatted straight into a byte buffer (no String per number) and handed to the
 * OS by {@link #flush()}, which swaps buffers so writers are blocked only for the swap.
 * Writers build a row while holding this object's monitor:
 * <pre>synchronized (tsv) { tsv.l(a).s(b).nul().end(); }</pre>
 * so a flush never cuts a row in half; a crash mid-write() leaves at most one unterminated last
 * line, which the reader drops. A {@link FileOutputStream} (not a FileChannel) so a thread
 * interrupt never closes the file.
 */
final class Tsv implements Closeable {
    private static final byte[] NULL = {'\\', 'N'};
    private static final byte[] TRUE = "true".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] FALSE = "false".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] MIN_LONG = Long.toString(Long.MIN_VALUE).getBytes(StandardCharsets.US_ASCII);

    private final FileOutputStream out;
    private final Object writeLock = new Object();
    private byte[] buf;
    private byte[] spare;
    private int len;
    private boolean rowStart = true;
    private long rows;

    Tsv(Path path, int initialCapacity) throws IOException {
        this.out = new FileOutputStream(path.toFile(), true);
        this.buf = new byte[initialCapacity];
        this.spare = new byte[initialCapacity];
    }

    /** Rows completed so far (call while holding the monitor for an exact figure). */
    long rows() {
        return rows;
    }

    private void ensure(int extra) {
        if (len + extra > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + extra));
        }
    }

    private void sep() {
        if (rowStart) {
            rowStart = false;
        } else {
            ensure(1);
            buf[len++] = '\t';
        }
    }

    private static final byte[] TENS = new byte[100];
    private static final byte[] ONES = new byte[100];

    static {
        for (int k = 0; k < 100; k++) {
            TENS[k] = (byte) ('0' + k / 10);
            ONES[k] = (byte) ('0' + k % 10);
        }
    }

    private static int digits(long v) {
        long p = 10;
        for (int d = 1; d < 19; d++) {
            if (v < p) {
                return d;
            }
            p *= 10;
        }
        return 19;
    }

    /** A long column (two digits per division: this runs for every number of every row). */
    Tsv l(long v) {
        sep();
        ensure(20);
        if (v < 0) {
            if (v == Long.MIN_VALUE) {
                System.arraycopy(MIN_LONG, 0, buf, len, MIN_LONG.length);
                len += MIN_LONG.length;
                return this;
            }
            buf[len++] = '-';
            v = -v;
        }
        int pos = len + digits(v);
        len = pos;
        while (v > Integer.MAX_VALUE) {
            long q = v / 100;
            int r = (int) (v - q * 100);
            v = q;
            buf[--pos] = ONES[r];
            buf[--pos] = TENS[r];
        }
        int i = (int) v;
        while (i >= 100) {
            int q = i / 100;
            int r = i - q * 100;
            i = q;
            buf[--pos] = ONES[r];
            buf[--pos] = TENS[r];
        }
        if (i >= 10) {
            buf[--pos] = ONES[i];
            buf[--pos] = TENS[i];
        } else {
            buf[--pos] = (byte) ('0' + i);
        }
        return this;
    }

    /** A long column that may hold {@link Rows#NULL}. */
    Tsv ln(long v) {
        return v == Rows.NULL ? nul() : l(v);
    }

    /** A nullable long column: {@code null} when {@code isNull}. */
    Tsv l(long v, boolean isNull) {
        return isNull ? nul() : l(v);
    }

    /** A nullable integer column. */
    Tsv n(Integer v) {
        return v == null ? nul() : l(v);
    }

    /** A null column. */
    Tsv nul() {
        sep();
        ensure(2);
        buf[len++] = NULL[0];
        buf[len++] = NULL[1];
        return this;
    }

    /** A nullable boolean column ({@code true}/{@code false}). */
    Tsv b(Boolean v) {
        if (v == null) {
            return nul();
        }
        sep();
        byte[] w = v ? TRUE : FALSE;
        ensure(w.length);
        System.arraycopy(w, 0, buf, len, w.length);
        len += w.length;
        return this;
    }

    /** A nullable string column; tabs, newlines and carriage returns become spaces. */
    Tsv s(String v) {
        if (v == null) {
            return nul();
        }
        sep();
        int n = v.length();
        ensure(n);
        int start = len;
        for (int k = 0; k < n; k++) {
            char c = v.charAt(k);
            if (c >= 0x80) {
                len = start;
                byte[] u = v.replace('\t', ' ').replace('\n', ' ').replace('\r', ' ')
                        .getBytes(StandardCharsets.UTF_8);
                ensure(u.length);
                System.arraycopy(u, 0, buf, len, u.length);
                len += u.length;
                return this;
            }
            buf[len++] = (c == '\t' || c == '\n' || c == '\r') ? (byte) ' ' : (byte) c;
        }
        return this;
    }

    /** A nullable list column of ints, comma-joined (empty list: empty field). */
    Tsv ints(int[] v) {
        if (v == null) {
            return nul();
        }
        sep();
        for (int k = 0; k < v.length; k++) {
            if (k > 0) {
                ensure(1);
                buf[len++] = ',';
            }
            rowStart = true; // l() must not add a tab inside the list
            l(v[k]);
        }
        return this;
    }

    /** A nullable list column of longs, comma-joined (empty list: empty field). */
    Tsv longs(long[] v) {
        if (v == null) {
            return nul();
        }
        sep();
        for (int k = 0; k < v.length; k++) {
            if (k > 0) {
                ensure(1);
                buf[len++] = ',';
            }
            rowStart = true;
            l(v[k]);
        }
        return this;
    }

    /** Ends the row. */
    Tsv end() {
        ensure(1);
        buf[len++] = '\n';
        rowStart = true;
        rows++;
        return this;
    }

    /** Hands every completed row to the OS (one write() call). Safe to call from any thread. */
    void flush() throws IOException {
        synchronized (writeLock) {
            byte[] full;
            int n;
            synchronized (this) {
                if (len == 0) {
                    return;
                }
                full = buf;
                n = len;
                buf = spare;
                len = 0;
            }
            try {
                out.write(full, 0, n);
            } finally {
                synchronized (this) {
                    spare = full;
                }
            }
        }
    }

    @Override
    public void close() throws IOException {
        flush();
        out.close();
    }
}
