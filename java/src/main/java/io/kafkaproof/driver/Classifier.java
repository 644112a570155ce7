package io.kafkaproof.driver;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The outcome of one send given the exception the Java producer reported for it:
 * {@code ok}, {@code fail} (the record is definitely not in the log) or {@code indefinite}
 * (it may or may not be). docs/java-client.md has the table and the reasoning.
 *
 * <p>Matches on simple class names along the exception's class hierarchy, not on classes,
 * so the same driver runs against every kafka-clients version 3.7-4.x (some classes come and
 * go between versions) and {@code classify} can answer for a name the classpath lacks.
 */
final class Classifier {
    /** Outcomes as written to the ledger. */
    static final String OK = "ok";
    static final String FAIL = "fail";
    static final String INDEFINITE = "indefinite";

    /**
     * The record never reached a broker, or every broker refuses it whatever happened before
     * (the same bytes would be refused again): definitely not written.
     */
    static final Set<String> NEVER_WRITTEN = Set.of(
            "RecordTooLargeException",        // client-side size check, or the broker's MESSAGE_TOO_LARGE for one record
            "RecordBatchTooLargeException",
            "InvalidTopicException",
            "AuthorizationException",         // Topic/Cluster/TransactionalId/Group...AuthorizationException
            "AuthenticationException",        // SaslAuthenticationException, SslAuthenticationException
            "SerializationException",
            "InterruptException",             // thrown by send() while it waited for metadata or buffer space
            "InvalidRecordException",
            "InvalidRequiredAcksException",
            "UnsupportedVersionException",
            "TransactionAbortedException",    // undrained batch failed by abortTransaction(): never sent
            "BufferExhaustedException");      // no buffer space within max.block.ms: never appended

    /**
     * Retriable errors the broker returns after checking, and before appending: the attempt that
     * got them was definitely not written. Whether the record is written then depends on the
     * earlier attempts, which the callback does not describe: fail only with a single attempt.
     */
    static final Set<String> REFUSED_BEFORE_APPEND = Set.of(
            "NotEnoughReplicasException",     // Partition.appendRecordsToLeader checks min ISR before the log append
            "NotLeaderOrFollowerException",
            "NotLeaderForPartitionException",
            "UnknownTopicOrPartitionException",
            "CorruptRecordException");

    /** The Java producer's message for a send() that never got the topic's metadata within max.block.ms. */
    static final String METADATA_TIMEOUT = "not present in metadata after";

    private final boolean singleAttempt;

    /** {@code retries}: the producer's {@code retries} setting (0: one attempt per batch). */
    Classifier(long retries) {
        this.singleAttempt = retries == 0;
    }

    /**
     * Outcome of a send.
     *
     * @param e      the exception reported (null: acknowledged)
     * @param inSend true when send() itself threw it, or called the callback with it before returning:
     *               the record never entered the producer's buffer, so it was never sent
     */
    String classify(Throwable e, boolean inSend) {
        if (e == null) {
            return OK;
        }
        if (inSend) {
            return FAIL;
        }
        List<String> names = hierarchy(e.getClass());
        return classify(names, e.getMessage());
    }

    /** Outcome for an exception known by its class hierarchy's simple names (most specific first). */
    String classify(List<String> names, String message) {
        if (names.contains("TimeoutException") && message != null && message.contains(METADATA_TIMEOUT)) {
            return FAIL;  // waitOnMetadata's TimeoutException: the record was never appended
        }
        for (String n : names) {
            if (NEVER_WRITTEN.contains(n)) {
                return FAIL;
            }
            if (REFUSED_BEFORE_APPEND.contains(n)) {
                return singleAttempt ? FAIL : INDEFINITE;
            }
        }
        // Timeouts (request timeout, an expired batch), NetworkException, DisconnectException,
        // NotEnoughReplicasAfterAppendException, KafkaStorageException, fenced/out-of-sequence
        // producers, "Producer is closed forcefully." and whatever we do not know.
        return INDEFINITE;
    }

    /** Simple names of a class and its superclasses, most specific first. */
    static List<String> hierarchy(Class<?> c) {
        List<String> names = new ArrayList<>();
        for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) {
            names.add(k.getSimpleName());
        }
        return names;
    }
}
