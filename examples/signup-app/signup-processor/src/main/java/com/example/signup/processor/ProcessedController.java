package com.example.signup.processor;

import java.util.List;

import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;

/** What was processed: ids in processing order, or each with where it was read. */
@RestController
public class ProcessedController {

    private final ProcessedStore store;

    public ProcessedController(ProcessedStore store) {
        this.store = store;
    }

    /** The processed sign-ups' ids in processing order (an id processed twice appears twice). */
    @GetMapping("/processed")
    public List<String> processed() {
        return store.ids();
    }

    /** Each processed sign-up with its topic, partition, offset and processing time (epoch ms). */
    @GetMapping("/processed/records")
    public List<ProcessedStore.Processed> records() {
        return store.all();
    }
}
