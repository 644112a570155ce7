package io.kafkaproof.driver;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;

/** The worker's progress file: JSON counters, replaced atomically (tmp + rename) so readers never see half a file. */
final class Progress {
    private final Path path;
    private final Path tmp;

    Progress(Path path) {
        this.path = path;
        this.tmp = path.resolveSibling(path.getFileName() + ".tmp");
    }

    private boolean finished;

    /** Writes {@code json} (a complete JSON object) atomically; nothing once the final counts are written. */
    synchronized void write(String json) {
        if (finished) {
            return;  // a periodic write built before the final one must not replace it
        }
        try {
            Files.write(tmp, json.getBytes(StandardCharsets.UTF_8));
            Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            Log.warn("could not write " + path + ": " + e);
        }
    }

    /** Writes the final counts; later writes (a periodic tick racing the worker's end) are ignored. */
    synchronized void finish(String json) {
        write(json);
        finished = true;
    }

    /** Closes the JSON object being built in {@code b} and writes it: as the final counts (with
     * {@code "done":true}) when {@code done}, else as a periodic update. */
    void publish(StringBuilder b, boolean done) {
        if (done) {
            finish(b.append(",\"done\":true}").toString());
        } else {
            write(b.append('}').toString());
        }
    }

    /** Appends {@code "name": {k: v, ...}} for a map of counts. */
    static void counts(StringBuilder b, String name, Map<String, ? extends Number> m) {
        Json.quote(b, name).append(":{");
        boolean first = true;
        for (Map.Entry<String, ? extends Number> e : m.entrySet()) {
            if (!first) {
                b.append(',');
            }
            first = false;
            Json.quote(b, e.getKey()).append(':').append(e.getValue());
        }
        b.append('}');
    }
}
