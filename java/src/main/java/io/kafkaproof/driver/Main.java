package io.kafkaproof.driver;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigException;

/**
 * kafkaproof's Java workload driver.
 *
 * <pre>
 * producer SPEC.json                  run a recording producer (see ProducerWorker)
 * consumer SPEC.json                  run a recording consumer (see ConsumerWorker)
 * share SPEC.json                     run a recording share consumer (KIP-932, see ShareConsumerWorker)
 * config-names producer|consumer      the client's config names, one per line
 * check-config producer|consumer SPEC.json
 *                                     build and close the client a worker of that spec would build (no
 *                                     connection): prints "ok", or the client's refusal and exits 1
 * classify EXCEPTION_CLASS [MESSAGE] [--in-send] [--retries N]
 *                                     the outcome (ok|fail|indefinite) the driver gives that exception
 * </pre>
 * Exit codes: 0 normal end, 1 the worker failed (stderr says why), 2 bad usage, spec or config,
 * 3 halted by the watchdog.
 */
public final class Main {
    private static final String USAGE = "usage: java io.kafkaproof.driver.Main producer|consumer|share SPEC.json\n"
            + "       ... config-names producer|consumer\n"
            + "       ... check-config producer|consumer SPEC.json\n"
            + "       ... classify EXCEPTION_CLASS [MESSAGE] [--in-send] [--retries N]";
    private static final String[] PACKAGES = {"org.apache.kafka.common.errors.", "org.apache.kafka.common.",
        "org.apache.kafka.clients.producer.", "org.apache.kafka.clients.consumer.", "java.lang."};

    private Main() {
    }

    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        if (args.length < 1) {
            System.err.println(USAGE);
            return 2;
        }
        try {
            switch (args[0]) {
                case "producer":
                case "consumer":
                case "share":
                    if (args.length != 2) {
                        System.err.println(USAGE);
                        return 2;
                    }
                    return worker(args[0], Path.of(args[1]));
                case "config-names":
                    return configNames(args);
                case "check-config":
                    return checkConfig(args);
                case "classify":
                    return classify(args);
                default:
                    System.err.println("unknown sub-command '" + args[0] + "'\n" + USAGE);
                    return 2;
            }
        } catch (Spec.SpecException e) {
            System.err.println("kafkaproof-driver: " + e.getMessage());
            return 2;
        }
    }

    private static int worker(String role, Path specPath) {
        Spec spec;
        try {
            spec = Spec.read(specPath);
        } catch (java.io.IOException e) {
            System.err.println("kafkaproof-driver: cannot read spec " + specPath + ": " + e);
            return 2;
        }
        String name = ("share".equals(role) ? "consumer" : role) + "-" + spec.lng("index", 0)
                + ("producer".equals(role) ? "" : "-" + spec.lng("incarnation", 0));
        Log.setName(name);
        Log.info("kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion() + ", pid "
                + ProcessHandle.current().pid() + ", spec " + specPath);
        Lifecycle lc = new Lifecycle(spec.lng("parent_pid", 0), spec.dbl("close_timeout_s", 10)).start();
        try {
            switch (role) {
                case "producer":
                    return new ProducerWorker(spec, lc).run();
                case "share":
                    return new ShareConsumerWorker(spec, lc).run();
                default:
                    return new ConsumerWorker(spec, lc).run();
            }
        } catch (ConfigException e) {
            Log.error("invalid " + role + " config: " + e.getMessage());
            return 2;
        } catch (Spec.SpecException e) {
            Log.error(e.getMessage());
            return 2;
        } catch (java.io.IOException | RuntimeException e) {
            Log.error(role + " failed: " + e);
            e.printStackTrace(System.err);
            return 1;
        }
    }

    private static int configNames(String[] args) {
        if (args.length != 2 || !(args[1].equals("producer") || args[1].equals("consumer"))) {
            System.err.println(USAGE);
            return 2;
        }
        for (String n : new TreeSet<>(args[1].equals("producer") ? ProducerConfig.configNames()
                : ConsumerConfig.configNames())) {
            System.out.println(n);
        }
        return 0;
    }

    /**
     * Builds the client a worker of this spec would build and closes it at once. Its bootstrap is never
     * contacted before the close, so this finds what kafka-clients refuses at construction (e.g.
     * delivery.timeout.ms below linger.ms + request.timeout.ms) before any cluster starts.
     */
    private static int checkConfig(String[] args) {
        if (args.length != 3 || !(args[1].equals("producer") || args[1].equals("consumer"))) {
            System.err.println(USAGE);
            return 2;
        }
        Spec spec;
        try {
            spec = Spec.read(Path.of(args[2]));
        } catch (java.io.IOException e) {
            System.err.println("kafkaproof-driver: cannot read spec " + args[2] + ": " + e);
            return 2;
        }
        try {
            if (args[1].equals("producer")) {
                new KafkaProducer<byte[], byte[]>(ProducerWorker.properties(spec, 0)).close(Duration.ZERO);
            } else {
                new KafkaConsumer<byte[], byte[]>(ConsumerWorker.properties(spec)).close(Duration.ZERO);
            }
        } catch (KafkaException e) {  // ConfigException is one; construction failures wrap theirs
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            System.out.println(root.getMessage());
            return 1;
        }
        System.out.println("ok");
        return 0;
    }

    private static int classify(String[] args) {
        String cls = null;
        String message = null;
        boolean inSend = false;
        long retries = Integer.MAX_VALUE;
        for (int k = 1; k < args.length; k++) {
            if (args[k].equals("--in-send")) {
                inSend = true;
            } else if (args[k].equals("--retries") && k + 1 < args.length) {
                retries = Long.parseLong(args[++k]);
            } else if (cls == null) {
                cls = args[k];
            } else if (message == null) {
                message = args[k];
            } else {
                System.err.println(USAGE);
                return 2;
            }
        }
        if (cls == null) {
            System.err.println(USAGE);
            return 2;
        }
        Classifier c = new Classifier(retries);
        System.out.println(inSend ? Classifier.FAIL : c.classify(names(cls), message));
        return 0;
    }

    /** Simple names along the hierarchy of exception class {@code name} (a simple or full name). */
    static List<String> names(String name) {
        List<String> candidates = new ArrayList<>();
        candidates.add(name);
        if (!name.contains(".")) {
            for (String p : PACKAGES) {
                candidates.add(p + name);
            }
        }
        for (String c : candidates) {
            try {
                Class<?> k = Class.forName(c, false, Main.class.getClassLoader());
                if (Throwable.class.isAssignableFrom(k)) {
                    return Classifier.hierarchy(k);
                }
            } catch (ClassNotFoundException | LinkageError e) {
                // try the next package
            }
        }
        List<String> only = new ArrayList<>();
        only.add(name.substring(name.lastIndexOf('.') + 1));  // unknown class: judged by its name alone
        return only;
    }
}
