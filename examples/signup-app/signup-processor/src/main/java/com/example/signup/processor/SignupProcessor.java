package com.example.signup.processor;

import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.stereotype.Service;

/** The business logic: read a sign-up's id, fail on poison ones, take the configured time, store it. */
@Service
public class SignupProcessor {

    private static final Logger log = LoggerFactory.getLogger(SignupProcessor.class);

    private final ProcessedStore store;
    private final ProcessorProperties props;
    private final ObjectMapper mapper;
    private final Pattern poison;

    public SignupProcessor(ProcessedStore store, ProcessorProperties props, ObjectMapper mapper) {
        this.store = store;
        this.props = props;
        this.mapper = mapper;
        this.poison = props.poisonPattern().isEmpty() ? null : Pattern.compile(props.poisonPattern());
    }

    public void process(ConsumerRecord<String, String> record) throws Exception {
        String id = idOf(record);
        if (poison != null && poison.matcher(id).find()) {
            throw new IllegalStateException("poison sign-up " + id + " (matches " + poison.pattern() + ")");
        }
        if (!props.delay().isZero()) {
            Thread.sleep(props.delay().toMillis());
        }
        boolean added = store.add(new ProcessedStore.Processed(id, record.topic(), record.partition(),
                record.offset(), System.currentTimeMillis()), props.deduplicate());
        if (!added) {
            log.info("sign-up {} processed before: skipped ({}-{}@{})", id, record.topic(), record.partition(),
                    record.offset());
        }
    }

    private String idOf(ConsumerRecord<String, String> record) throws Exception {
        if (record.value() != null) {
            JsonNode id = mapper.readTree(record.value()).get("id");
            if (id != null && !id.isNull()) {
                return id.asText();
            }
        }
        if (record.key() != null) {
            return record.key();
        }
        throw new IllegalArgumentException("a record without an id at " + record.topic() + "-"
                + record.partition() + "@" + record.offset());
    }
}
