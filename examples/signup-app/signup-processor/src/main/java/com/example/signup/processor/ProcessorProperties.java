package com.example.signup.processor;

import java.time.Duration;

import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.bind.DefaultValue;

/**
 * The processor's own settings ({@code processor.*}); the consumer's and the listener container's
 * are Spring Boot's {@code spring.kafka.*} (e.g. {@code spring.kafka.listener.ack-mode}).
 *
 * @param topic            the topic listened to
 * @param errorHandler     what happens to a record whose processing keeps failing: {@code skip}
 *                         (retry, then log and go on) or {@code dead-letter} (retry, then publish it
 *                         to {@code deadLetterTopic})
 * @param deadLetterTopic  where {@code dead-letter} publishes (default: the topic + {@code .DLT})
 * @param retry            how often and how far apart a failing record is tried again
 * @param poisonPattern    a regular expression: sign-ups whose id matches it fail every time (none if empty)
 * @param delay            time spent processing each record (a slow downstream call)
 * @param deduplicate      skip a sign-up whose id was processed before (an idempotent consumer)
 */
@ConfigurationProperties(prefix = "processor")
public record ProcessorProperties(
        @DefaultValue("signups") String topic,
        @DefaultValue("skip") ErrorHandling errorHandler,
        String deadLetterTopic,
        @DefaultValue Retry retry,
        @DefaultValue("") String poisonPattern,
        @DefaultValue("0ms") Duration delay,
        @DefaultValue("false") boolean deduplicate) {

    /** The error handler's recoverer. */
    public enum ErrorHandling { SKIP, DEAD_LETTER }

    /**
     * @param attempts retries after the first failure
     * @param interval the pause between two tries
     */
    public record Retry(@DefaultValue("2") long attempts, @DefaultValue("200ms") Duration interval) {
    }

    /** The dead-letter topic's name. */
    public String deadLetterTopicName() {
        return deadLetterTopic == null || deadLetterTopic.isBlank() ? topic + ".DLT" : deadLetterTopic;
    }
}
