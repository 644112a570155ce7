package io.kafkaproof.driver;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Message values exactly as ledger.encode_payload / decode_value_id: UTF-8
 * {@code kp|<run_id>|<value_id>|} padded with {@code x} to the value size.
 */
final class Payload {
    private final byte[] head;   // "kp|<run_id>|"
    private final int size;

    Payload(String runId, int size) {
        this.head = ("kp|" + runId + "|").getBytes(StandardCharsets.UTF_8);
        this.size = size;
    }

    /** The value id of producer {@code index}'s {@code seq}-th value (ledger.make_value_id). */
    static long valueId(int index, long seq) {
        return ((long) index << 32) + seq;
    }

    /** A new payload for {@code valueId} (a value id is never negative). */
    byte[] encode(long valueId) {
        if (valueId < 0) {
            throw new IllegalArgumentException("negative value id " + valueId);
        }
        int digits = 1;
        for (long t = valueId; t >= 10; t /= 10) {
            digits++;
        }
        int headLen = head.length + digits + 1;
        byte[] b = new byte[Math.max(size, headLen)];
        System.arraycopy(head, 0, b, 0, head.length);
        long v = valueId;
        for (int k = head.length + digits - 1; k >= head.length; k--) {
            b[k] = (byte) ('0' + (v % 10));
            v /= 10;
        }
        b[head.length + digits] = '|';
        Arrays.fill(b, headLen, b.length, (byte) 'x');
        return b;
    }

    /** The value id in a payload; -1 for foreign or malformed data (ledger.decode_value_id without run check). */
    static long decode(byte[] p) {
        if (p == null || p.length < 4 || p[0] != 'k' || p[1] != 'p' || p[2] != '|') {
            return -1;
        }
        int k = 3;
        while (k < p.length && p[k] != '|') {
            k++;
        }
        k++;  // first byte of the id
        if (k >= p.length) {
            return -1;
        }
        boolean neg = p[k] == '-';
        if (neg) {
            k++;
        }
        long v = 0;
        int start = k;
        while (k < p.length && p[k] != '|') {
            int d = p[k] - '0';
            if (d < 0 || d > 9 || k - start >= 19) {
                return -1;
            }
            v = v * 10 + d;
            k++;
        }
        if (k >= p.length || k == start) {
            return -1;  // Python needs the third '|' too (split into 4 parts)
        }
        return neg ? -v : v;
    }
}
