package com.example.signup.processor;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.context.event.ApplicationReadyEvent;
import org.springframework.boot.context.properties.ConfigurationPropertiesScan;
import org.springframework.boot.web.context.WebServerApplicationContext;
import org.springframework.context.event.EventListener;
import org.springframework.core.env.Environment;

/** The processor service: a @KafkaListener on the sign-up topic that stores each sign-up it processed. */
@SpringBootApplication
@ConfigurationPropertiesScan
public class SignupProcessorApplication {

    private static final Logger log = LoggerFactory.getLogger(SignupProcessorApplication.class);

    public static void main(String[] args) {
        SpringApplication.run(SignupProcessorApplication.class, args);
    }

    @EventListener
    public void onReady(ApplicationReadyEvent event) {
        ProcessorProperties props = event.getApplicationContext().getBean(ProcessorProperties.class);
        Environment env = event.getApplicationContext().getEnvironment();
        int port = ((WebServerApplicationContext) event.getApplicationContext()).getWebServer().getPort();
        log.info("signup-processor started: port={} topic={} group={} ack-mode={} error-handler={} retries={} "
                        + "poison-pattern={} delay={} deduplicate={} bootstrap={}",
                port, props.topic(), env.getProperty("spring.kafka.consumer.group-id"),
                env.getProperty("spring.kafka.listener.ack-mode", "BATCH"), props.errorHandler(),
                props.retry().attempts(), props.poisonPattern(), props.delay(), props.deduplicate(),
                env.getProperty("spring.kafka.bootstrap-servers", "localhost:9092"));
    }
}
