package com.example.signup.processor;

import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.NestedExceptionUtils;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.util.backoff.FixedBackOff;

/** The listener container's error handler (Spring Boot gives it to the auto-configured container factory). */
@Configuration
public class ErrorHandlingConfig {

    private static final Logger log = LoggerFactory.getLogger(ErrorHandlingConfig.class);

    @Bean
    @ConditionalOnProperty(name = "processor.error-handler", havingValue = "skip", matchIfMissing = true)
    public DefaultErrorHandler retryThenSkip(ProcessorProperties props) {
        return new DefaultErrorHandler(
                (record, error) -> log.error("sign-up record {}-{}@{} skipped after {} retries: {}", record.topic(),
                        record.partition(), record.offset(), props.retry().attempts(),
                        NestedExceptionUtils.getMostSpecificCause(error).toString()),
                backOff(props));
    }

    @Bean
    @ConditionalOnProperty(name = "processor.error-handler", havingValue = "dead-letter")
    public DefaultErrorHandler retryThenDeadLetter(ProcessorProperties props, KafkaTemplate<Object, Object> template) {
        String dlt = props.deadLetterTopicName();
        // Partition -1: the producer picks one, so the dead-letter topic may have any number of partitions.
        DeadLetterPublishingRecoverer recoverer = new DeadLetterPublishingRecoverer(template,
                (record, error) -> new TopicPartition(dlt, -1));
        return new DefaultErrorHandler(recoverer, backOff(props));
    }

    @Bean
    @ConditionalOnProperty(name = "processor.error-handler", havingValue = "dead-letter")
    public NewTopic deadLetterTopic(ProcessorProperties props) {
        return TopicBuilder.name(props.deadLetterTopicName()).build();
    }

    private static FixedBackOff backOff(ProcessorProperties props) {
        return new FixedBackOff(props.retry().interval().toMillis(), props.retry().attempts());
    }
}
