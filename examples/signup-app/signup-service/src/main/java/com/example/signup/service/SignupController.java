package com.example.signup.service;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.SendResult;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

/** POST /signups: one Kafka record per call, keyed by the sign-up's id, its value the JSON body. */
@RestController
public class SignupController {

    private static final Logger log = LoggerFactory.getLogger(SignupController.class);

    private final KafkaTemplate<String, String> template;
    private final SignupProperties props;
    private final ObjectMapper mapper;

    public SignupController(KafkaTemplate<String, String> template, SignupProperties props, ObjectMapper mapper) {
        this.template = template;
        this.props = props;
        this.mapper = mapper;
    }

    @PostMapping("/signups")
    public ResponseEntity<Map<String, Object>> signup(@RequestBody Map<String, Object> body)
            throws JsonProcessingException {
        Object rawId = body.get("id");
        if (rawId == null || rawId.toString().isBlank()) {
            return answer(HttpStatus.BAD_REQUEST, null, "the body needs an \"id\"");
        }
        String id = rawId.toString();
        String value = mapper.writeValueAsString(body);
        CompletableFuture<SendResult<String, String>> future;
        try {
            future = template.send(props.topic(), id, value);
        } catch (RuntimeException e) {  // e.g. no metadata within max.block.ms
            log.warn("sign-up {} not sent: {}", id, describe(e));
            return answer(HttpStatus.SERVICE_UNAVAILABLE, id, describe(e));
        }
        if (props.answer() == SignupProperties.Answer.BEFORE_ACK) {
            // What many services do: fire and forget, log a failure nobody sees.
            future.whenComplete((result, error) -> {
                if (error != null) {
                    log.warn("sign-up {} was accepted but its send failed: {}", id, describe(error));
                }
            });
            return answer(HttpStatus.ACCEPTED, id, null);
        }
        try {
            SendResult<String, String> result = future.get(props.ackTimeout().toMillis(), TimeUnit.MILLISECONDS);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("id", id);
            out.put("partition", result.getRecordMetadata().partition());
            out.put("offset", result.getRecordMetadata().offset());
            return ResponseEntity.ok(out);
        } catch (TimeoutException e) {
            log.warn("sign-up {}: no acknowledgement within {}", id, props.ackTimeout());
            return answer(HttpStatus.SERVICE_UNAVAILABLE, id, "no acknowledgement within " + props.ackTimeout());
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            log.warn("sign-up {}: send failed: {}", id, describe(cause));
            return answer(HttpStatus.SERVICE_UNAVAILABLE, id, describe(cause));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return answer(HttpStatus.SERVICE_UNAVAILABLE, id, "interrupted");
        }
    }

    /** An exception and its causes, e.g. "KafkaProducerException: Failed to send; TimeoutException: Expiring...". */
    private static String describe(Throwable error) {
        StringBuilder out = new StringBuilder();
        for (Throwable t = error; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (out.length() > 0) {
                out.append("; ");
            }
            out.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return out.toString();
    }

    private static ResponseEntity<Map<String, Object>> answer(HttpStatus status, String id, String error) {
        Map<String, Object> out = new LinkedHashMap<>();
        if (id != null) {
            out.put("id", id);
        }
        if (error != null) {
            out.put("error", error);
        }
        return ResponseEntity.status(status).body(out);
    }
}
