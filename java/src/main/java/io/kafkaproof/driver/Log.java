package io.kafkaproof.driver;

import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;

/** The driver's own log lines, to stderr with a timestamp (client logs go through SLF4J, also to stderr). */
final class Log {
    private static final DateTimeFormatter TS = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS");
    private static volatile String name = "kafkaproof-driver";

    private Log() {
    }

    /** Names the worker in every line, e.g. {@code producer-0}. */
    static void setName(String n) {
        name = n;
    }

    static void info(String msg) {
        line("INFO ", msg);
    }

    static void warn(String msg) {
        line("WARN ", msg);
    }

    static void error(String msg) {
        line("ERROR", msg);
    }

    private static void line(String level, String msg) {
        System.err.println("[" + LocalDateTime.now().format(TS) + "] " + level + " " + name + ": " + msg);
    }
}
