package com.example.signup.service;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.context.event.ApplicationReadyEvent;
import org.springframework.boot.context.properties.ConfigurationPropertiesScan;
import org.springframework.boot.web.context.WebServerApplicationContext;
import org.springframework.context.event.EventListener;

/** The sign-up service: POST /signups sends one record per call to Kafka. */
@SpringBootApplication
@ConfigurationPropertiesScan
public class SignupServiceApplication {

    private static final Logger log = LoggerFactory.getLogger(SignupServiceApplication.class);

    public static void main(String[] args) {
        SpringApplication.run(SignupServiceApplication.class, args);
    }

    @EventListener
    public void onReady(ApplicationReadyEvent event) {
        SignupProperties props = event.getApplicationContext().getBean(SignupProperties.class);
        int port = ((WebServerApplicationContext) event.getApplicationContext()).getWebServer().getPort();
        String bootstrap = event.getApplicationContext().getEnvironment()
                .getProperty("spring.kafka.bootstrap-servers", "localhost:9092");
        log.info("signup-service started: port={} topic={} answer={} ack-timeout={} bootstrap={}",
                port, props.topic(), props.answer(), props.ackTimeout(), bootstrap);
    }
}
