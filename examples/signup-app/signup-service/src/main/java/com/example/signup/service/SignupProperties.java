package com.example.signup.service;

import java.time.Duration;

import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.bind.DefaultValue;

/**
 * The service's own settings ({@code signup.*}); Kafka's are Spring Boot's {@code spring.kafka.*}.
 *
 * @param topic      the topic each sign-up is sent to
 * @param answer     {@code before-ack}: answer 202 as soon as {@code send()} returned (the record may
 *                   still be lost); {@code after-ack}: answer 200 once the broker acknowledged it,
 *                   503 when the send failed or no acknowledgement came within {@code ackTimeout}
 * @param ackTimeout how long an {@code after-ack} request waits for the acknowledgement
 */
@ConfigurationProperties(prefix = "signup")
public record SignupProperties(
        @DefaultValue("signups") String topic,
        @DefaultValue("before-ack") Answer answer,
        @DefaultValue("10s") Duration ackTimeout) {

    /** When the endpoint answers. */
    public enum Answer { BEFORE_ACK, AFTER_ACK }
}
