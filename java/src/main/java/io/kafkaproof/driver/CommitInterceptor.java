package io.kafkaproof.driver;

import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Records the commits the Java consumer makes by itself with {@code enable.auto.commit=true}
 * (inside poll() and close()), which no callback reports. Kafka calls {@code onCommit} for every
 * successful commit; the worker keeps only those of commit=auto. Failed auto-commits are only
 * logged by the client (WARN, on stderr).
 */
public final class CommitInterceptor implements ConsumerInterceptor<byte[], byte[]> {
    @Override
    public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
        return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
        ConsumerWorker w = ConsumerWorker.current;
        if (w != null) {
            w.autoCommitted(offsets);
        }
    }

    @Override
    public void close() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
    }
}
