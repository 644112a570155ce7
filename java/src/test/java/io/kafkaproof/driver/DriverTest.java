package io.kafkaproof.driver;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.errors.NotEnoughReplicasAfterAppendException;
import org.apache.kafka.common.errors.NotEnoughReplicasException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class DriverTest {
    @TempDir
    Path tmp;

    @Test
    void jsonParsesSpecs() {
        Object v = Json.parse("{\"a\": [1, 2.5, \"x\\ty\\u0041\"], \"b\": null, \"c\": true, \"d\": {}}");
        Map<?, ?> m = (Map<?, ?>) v;
        assertEquals(List.of(1L, 2.5, "x\tyA"), m.get("a"));
        assertEquals(null, m.get("b"));
        assertEquals(Boolean.TRUE, m.get("c"));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("{\"a\": 1,}"));
        assertThrows(IllegalArgumentException.class, () -> Json.parse("[1 2]"));
    }

    @Test
    void defaultsAreTheJarsOwnParsedBackByOurJson() {
        Map<?, ?> doc = (Map<?, ?>) Json.parse(Defaults.json());
        assertEquals(org.apache.kafka.common.utils.AppInfoParser.getVersion(), doc.get("version"));
        Map<?, ?> producer = (Map<?, ?>) doc.get("producer");
        assertEquals("LIST", ((Map<?, ?>) producer.get("bootstrap.servers")).get("type"));
        assertEquals("all", ((Map<?, ?>) producer.get("acks")).get("default"));
        assertTrue(((Map<?, ?>) doc.get("consumer")).containsKey("group.id"));
        assertTrue(((Map<?, ?>) doc.get("admin")).containsKey("bootstrap.servers"));
    }

    @Test
    void assignmentAfterRebalanceEvents() {
        int[] a = ConsumerStreams.assignmentAfter(new int[0], "assign", new int[] {2, 0});
        assertArrayEquals(new int[] {0, 2}, a);
        a = ConsumerStreams.assignmentAfter(a, "revoke", new int[] {2});  // cooperative: only what moves
        assertArrayEquals(new int[] {0}, a);
        a = ConsumerStreams.assignmentAfter(a, "assign", new int[] {1, 2});
        assertArrayEquals(new int[] {0, 1, 2}, a);
        a = ConsumerStreams.assignmentAfter(a, "lost", new int[] {0, 1, 2});
        assertArrayEquals(new int[0], a);
        assertThrows(IllegalArgumentException.class, () -> ConsumerStreams.assignmentAfter(new int[0], "commit", new int[] {1}));
    }

    @Test
    void tsvRowsNullsListsAndEscapes() throws Exception {
        Path p = tmp.resolve("x.tsv");
        try (Tsv t = new Tsv(p, 8)) {
            synchronized (t) {
                t.l(-5).l(0).l(Long.MAX_VALUE).l(Long.MIN_VALUE).ln(Rows.NULL).nul().s("a\tb\nc").s("é").b(true).b(null)
                        .ints(new int[] {1, 2}).longs(new long[0]).longs(null).end();
            }
            t.flush();
            synchronized (t) {
                t.l(7).end();
            }
        }
        String text = Files.readString(p, StandardCharsets.UTF_8);
        assertEquals("-5\t0\t9223372036854775807\t-9223372036854775808\t\\N\t\\N\ta b c\té\ttrue\t\\N\t1,2\t\t\\N\n7\n", text);
    }

    @Test
    void stagedRowsGrowDrainAndRecycle() {
        Rows rows = new Rows(2, 1, 2);
        for (int k = 0; k < 5; k++) {
            synchronized (rows) {
                int r = rows.add();
                rows.l[r * 2] = k;
                rows.l[r * 2 + 1] = k == 3 ? Rows.NULL : 10 * k;
                rows.o[r] = "v" + k;
            }
        }
        Rows.Batch b = rows.drain();
        assertEquals(5, b.rows);
        assertEquals(20, b.l[5]);
        assertEquals(Rows.NULL, b.l[7]);
        assertEquals(40, b.l[9]);
        assertEquals("v4", b.o[4]);
        rows.recycle(b);
        assertEquals(null, b.o[4]);
        assertEquals(0, rows.drain().rows);
        synchronized (rows) {
            rows.l[rows.add() * 2] = 42;
        }
        assertEquals(42, rows.drain().l[0]);
    }

    @Test
    void payloadMatchesLedgerEncoding() {
        Payload p = new Payload("run1", 30);
        long vid = Payload.valueId(2, 17);
        byte[] b = p.encode(vid);
        String s = new String(b, StandardCharsets.US_ASCII);
        assertEquals(30, b.length);
        assertTrue(s.startsWith("kp|run1|" + ((2L << 32) + 17) + "|x"), s);
        assertEquals(vid, Payload.decode(b));
        assertEquals(vid, Payload.decode(new Payload("r", 0).encode(vid)));
        assertEquals(-1, Payload.decode("kp|r|12".getBytes(StandardCharsets.US_ASCII)));
        assertEquals(-1, Payload.decode("foreign".getBytes(StandardCharsets.US_ASCII)));
        assertEquals(-1, Payload.decode(null));
    }

    @Test
    void numbersFormatLikeLongToString() throws Exception {
        Path p = tmp.resolve("n.tsv");
        java.util.Random rng = new java.util.Random(3);
        StringBuilder expected = new StringBuilder();
        try (Tsv t = new Tsv(p, 16)) {
            long[] edge = {0, 9, 10, 99, 100, 101, 2147483647L, 2147483648L, 999999999999L, 1000000000000000000L,
                Long.MAX_VALUE, -1, -2147483648L, Long.MIN_VALUE + 1};
            for (int k = 0; k < 2000; k++) {
                long v = k < edge.length ? edge[k] : rng.nextLong() >> rng.nextInt(63);
                synchronized (t) {
                    t.l(v).end();
                }
                expected.append(v).append('\n');
            }
        }
        assertEquals(expected.toString(), Files.readString(p, StandardCharsets.US_ASCII));
    }

    @Test
    void classification() {
        Classifier c = new Classifier(Integer.MAX_VALUE);
        assertEquals("ok", c.classify(null, false));
        assertEquals("indefinite", c.classify(new TimeoutException(
                "Expiring 1 record(s) for t-0: 1018 ms has passed since batch creation"), false));
        assertEquals("fail", c.classify(new TimeoutException("Topic t not present in metadata after 60000 ms."), false));
        assertEquals("fail", c.classify(new TimeoutException("anything"), true));
        assertEquals("indefinite", c.classify(new NetworkException("x"), false));
        assertEquals("indefinite", c.classify(new NotEnoughReplicasException("x"), false));
        assertEquals("fail", new Classifier(0).classify(new NotEnoughReplicasException("x"), false));
        assertEquals("indefinite", new Classifier(0).classify(new NotEnoughReplicasAfterAppendException("x"), false));
        assertEquals("fail", c.classify(new RecordTooLargeException("x"), false));
        assertEquals("fail", c.classify(new TopicAuthorizationException("x"), false));
        assertEquals("indefinite", c.classify(new KafkaException("Producer is closed forcefully."), false));
        assertEquals(List.of("SaslAuthenticationException", "AuthenticationException", "ApiException",
                "KafkaException", "RuntimeException", "Exception", "Throwable"), Main.names("SaslAuthenticationException"));
        assertEquals(List.of("NoSuchException"), Main.names("com.example.NoSuchException"));
    }

    @Test
    void keysFollowTheDistribution() {
        java.util.Random rng = new java.util.Random(1);
        assertEquals(null, new KeyChooser(null).choose(3, rng));
        Spec seqKeys = new Spec(Map.of("distribution", "sequential", "count", 4L), "t");
        assertEquals("k3", new KeyChooser(seqKeys).choose(7, rng));
        Spec single = new Spec(Map.of("distribution", "single", "key", "K"), "t");
        assertEquals("K", new KeyChooser(single).choose(7, rng));
        Spec bad = new Spec(Map.of("distribution", "zipf"), "t");
        assertThrows(Spec.SpecException.class, () -> new KeyChooser(bad));
    }

    @Test
    void copierNumbersKeysAndClientsMatchTheLibrdkafkaCopier() {
        // run/copier.py: txn_number(3, 2, 7) and output_key(b"k1", ...)
        assertEquals((3L << 40) | (2L << 24) | 7, CopierWorker.txnNumber(3, 2, 7));
        long txn = CopierWorker.txnNumber(1, 0, 5);
        assertEquals("k1|" + txn, new String(CopierWorker.outputKey("k1".getBytes(StandardCharsets.UTF_8), txn),
                StandardCharsets.UTF_8));
        assertEquals("|" + txn, new String(CopierWorker.outputKey(null, txn), StandardCharsets.UTF_8));
        Spec spec = new Spec(Map.of("bootstrap", "h:9", "group", "g", "topic", "t", "commit", "sync",
                "pipeline", Map.of("batch_size", 40L, "transaction_timeout_ms", 9000L,
                        "producer_config", Map.of("linger.ms", 7L, "transactional.id", "mine"))), "t");
        java.util.Properties p = CopierWorker.producerProperties(spec, "kp-x-0");
        assertEquals("kp-x-0", p.getProperty("transactional.id"));  // the driver's: a restart keeps it
        assertEquals("7", p.getProperty("linger.ms"));
        assertEquals("9000", p.getProperty("transaction.timeout.ms"));
        assertEquals("all", p.getProperty("acks"));
        java.util.Properties c = CopierWorker.consumerProperties(spec);
        assertEquals("40", c.getProperty("max.poll.records"));
        assertEquals("false", c.getProperty("enable.auto.commit"));
        assertEquals("read_committed", c.getProperty("isolation.level"));
    }
}
