package com.example.signup.processor;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.springframework.stereotype.Component;

/** The sign-ups processed so far, in processing order (in memory: lost when the service stops). */
@Component
public class ProcessedStore {

    /** One processed sign-up and where it was read. */
    public record Processed(String id, String topic, int partition, long offset, long processedAtMs) {
    }

    private final List<Processed> processed = new ArrayList<>();
    private final Set<String> ids = new HashSet<>();

    /** Adds one; with {@code deduplicate} an id seen before is not added. Returns whether it was added. */
    public synchronized boolean add(Processed p, boolean deduplicate) {
        boolean first = ids.add(p.id());
        if (!first && deduplicate) {
            return false;
        }
        processed.add(p);
        return true;
    }

    public synchronized List<Processed> all() {
        return new ArrayList<>(processed);
    }

    public synchronized List<String> ids() {
        return processed.stream().map(Processed::id).toList();
    }
}
