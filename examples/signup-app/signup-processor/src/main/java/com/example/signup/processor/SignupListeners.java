package com.example.signup.processor;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.boot.autoconfigure.condition.ConditionalOnExpression;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.stereotype.Component;

/**
 * The listener, in the two shapes Spring Kafka needs: the container commits by itself (ack modes
 * RECORD, BATCH, TIME, COUNT...) or the listener acknowledges each record (MANUAL, MANUAL_IMMEDIATE).
 */
public final class SignupListeners {

    private static final String MANUAL =
            "'${spring.kafka.listener.ack-mode:BATCH}'.toUpperCase().startsWith('MANUAL')";

    private SignupListeners() {
    }

    /** Ack modes where the container commits: the listener only processes. */
    @Component
    @ConditionalOnExpression("!(" + MANUAL + ")")
    public static class ContainerAcked {
        private final SignupProcessor processor;

        public ContainerAcked(SignupProcessor processor) {
            this.processor = processor;
        }

        @KafkaListener(id = "signups", idIsGroup = false, topics = "${processor.topic:signups}")
        public void onSignup(ConsumerRecord<String, String> record) throws Exception {
            processor.process(record);
        }
    }

    /** MANUAL / MANUAL_IMMEDIATE: acknowledged once processed. */
    @Component
    @ConditionalOnExpression(MANUAL)
    public static class ManuallyAcked {
        private final SignupProcessor processor;

        public ManuallyAcked(SignupProcessor processor) {
            this.processor = processor;
        }

        @KafkaListener(id = "signups", idIsGroup = false, topics = "${processor.topic:signups}")
        public void onSignup(ConsumerRecord<String, String> record, Acknowledgment ack) throws Exception {
            processor.process(record);
            ack.acknowledge();
        }
    }
}
