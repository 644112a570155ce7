package io.kafkaproof.driver;

import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * The defaults of the kafka-clients jar on the classpath, as its own {@code ConfigDef}s declare them
 * ({@code Main defaults}): one JSON document
 * <pre>
 * {"version": "4.3.1", "producer": {NAME: {"type": "LONG", "default": "5"}, ...}, "consumer": {...}, "admin": {...}}
 * </pre>
 * A default is the client's own string form ({@code ConfigDef.convertToString}: a list comma-joined, a class
 * its name, a password "[hidden]"); {@code null} when the default is null; no {@code "default"} key when the
 * property has none (it must be given, e.g. bootstrap.servers).
 */
final class Defaults {
    private Defaults() {
    }

    /** The JSON document of the three clients' defaults. */
    static String json() {
        Map<String, ConfigDef> defs = new TreeMap<>();
        defs.put("producer", ProducerConfig.configDef());
        defs.put("consumer", ConsumerConfig.configDef());
        defs.put("admin", AdminClientConfig.configDef());
        StringBuilder b = new StringBuilder("{\"version\": ");
        Json.quote(b, AppInfoParser.getVersion());
        for (Map.Entry<String, ConfigDef> role : defs.entrySet()) {
            b.append(",\n ");
            Json.quote(b, role.getKey()).append(": {");
            String sep = "";
            for (ConfigDef.ConfigKey key : new TreeMap<>(role.getValue().configKeys()).values()) {
                b.append(sep).append("\n  ");
                sep = ",";
                Json.quote(b, key.name).append(": {\"type\": ");
                Json.quote(b, key.type.name());
                if (key.hasDefault()) {
                    b.append(", \"default\": ");
                    String v = ConfigDef.convertToString(key.defaultValue, key.type);
                    if (v == null) {
                        b.append("null");
                    } else {
                        Json.quote(b, v);
                    }
                }
                b.append('}');
            }
            b.append("}");
        }
        return b.append("}").toString();
    }
}
