package io.kafkaproof.driver;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/** Typed, null-tolerant access to a worker spec (the JSON the runner writes; see runner.Workers). */
final class Spec {
    final Map<String, Object> m;
    private final String where;

    Spec(Map<String, Object> m, String where) {
        this.m = m;
        this.where = where;
    }

    @SuppressWarnings("unchecked")
    static Spec read(Path path) throws IOException {
        Object v;
        try {
            v = Json.parse(Files.readString(path, StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            throw new SpecException(path + ": " + e.getMessage());
        }
        if (!(v instanceof Map)) {
            throw new SpecException(path + ": a worker spec must be a JSON object");
        }
        return new Spec((Map<String, Object>) v, path.toString());
    }

    /**
     * The cluster's connection config (security settings, kafka-clients names) the runner puts in the
     * environment rather than in the spec file, which stays in the run directory: it holds credentials.
     */
    @SuppressWarnings("unchecked")
    static Map<String, Object> connection() {
        String json = System.getenv("KAFKAPROOF_CLIENT_CONNECTION");
        if (json == null || json.isBlank()) {
            return Collections.emptyMap();
        }
        Object v = Json.parse(json);
        if (!(v instanceof Map)) {
            throw new SpecException("KAFKAPROOF_CLIENT_CONNECTION must be a JSON object");
        }
        return (Map<String, Object>) v;
    }

    /**
     * The properties every worker's client starts from: the cluster's connection ({@link #connection()}),
     * then {@code config} (the scenario's settings in the client's own names; may be null) without the
     * names in {@code owned}, which the worker sets itself (each one given is warned about and left out).
     * {@code where} names the config in the warning (e.g. {@code config}).
     */
    static Properties clientProperties(Spec config, Collection<String> owned, String where) {
        Properties p = new Properties();
        for (Map.Entry<String, Object> e : connection().entrySet()) {
            p.setProperty(e.getKey(), propertyValue(e.getValue()));
        }
        if (config != null) {
            for (Map.Entry<String, Object> e : config.m.entrySet()) {
                if (owned.contains(e.getKey())) {
                    Log.warn(where + "." + e.getKey() + " ignored: the driver sets it");
                } else if (e.getValue() != null) {
                    p.setProperty(e.getKey(), propertyValue(e.getValue()));
                }
            }
        }
        return p;
    }

    /** True when the key is present and not null. */
    boolean has(String key) {
        return m.get(key) != null;
    }

    String str(String key) {
        Object v = m.get(key);
        if (v == null) {
            throw new SpecException(where + ": field '" + key + "' is required");
        }
        return String.valueOf(v);
    }

    String str(String key, String dflt) {
        Object v = m.get(key);
        return v == null ? dflt : String.valueOf(v);
    }

    long lng(String key) {
        if (!has(key)) {
            throw new SpecException(where + ": field '" + key + "' is required");
        }
        return lng(key, 0);
    }

    long lng(String key, long dflt) {
        Object v = m.get(key);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Number) {
            return ((Number) v).longValue();
        }
        try {
            return Long.parseLong(v.toString().trim());
        } catch (NumberFormatException e) {
            throw new SpecException(where + ": field '" + key + "' must be an integer, got " + v);
        }
    }

    double dbl(String key, double dflt) {
        Object v = m.get(key);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Number) {
            return ((Number) v).doubleValue();
        }
        try {
            return Double.parseDouble(v.toString().trim());
        } catch (NumberFormatException e) {
            throw new SpecException(where + ": field '" + key + "' must be a number, got " + v);
        }
    }

    boolean bool(String key, boolean dflt) {
        Object v = m.get(key);
        if (v == null) {
            return dflt;
        }
        if (v instanceof Boolean) {
            return (Boolean) v;
        }
        return "true".equalsIgnoreCase(v.toString().trim());
    }

    @SuppressWarnings("unchecked")
    Spec sub(String key) {
        Object v = m.get(key);
        if (v == null) {
            return null;
        }
        if (!(v instanceof Map)) {
            throw new SpecException(where + ": field '" + key + "' must be an object");
        }
        return new Spec((Map<String, Object>) v, where + ":" + key);
    }

    @SuppressWarnings("unchecked")
    List<Object> list(String key) {
        Object v = m.get(key);
        if (v == null) {
            return Collections.emptyList();
        }
        if (!(v instanceof List)) {
            throw new SpecException(where + ": field '" + key + "' must be a list");
        }
        return (List<Object>) v;
    }

    /** A client property value as kafka-clients expects it: strings; lists comma-joined. */
    static String propertyValue(Object v) {
        if (v instanceof List) {
            StringBuilder b = new StringBuilder();
            for (Object o : (List<?>) v) {
                if (b.length() > 0) {
                    b.append(',');
                }
                b.append(propertyValue(o));
            }
            return b.toString();
        }
        if (v instanceof Double && ((Double) v) == Math.rint((Double) v) && !((Double) v).isInfinite()) {
            return Long.toString(((Double) v).longValue());
        }
        return String.valueOf(v);
    }

    /** A spec that cannot be run; the message names the file and the field. */
    static final class SpecException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        SpecException(String message) {
            super(message);
        }
    }
}
