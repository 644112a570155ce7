package io.kafkaproof.driver;

import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * How a worker stops: SIGTERM/SIGINT, its parent process dying, or the end of its work.
 *
 * <p>A stop request sets {@link #stopping()}, interrupts the main thread if it is blocked in a
 * client call that may wait long (send() waiting for metadata, a transaction call), interrupts it
 * again if it still blocks {@code graceS} later, and halts the JVM {@code graceS + 5} s after the
 * request whatever blocks: a worker never outlives its run, even when the cluster is gone.
 * The "ticker" thread runs the periodic work (flushing streams, progress) and the parent check.
 *
 * <p>When the parent (the runner) dies nobody waits for a clean close: the worker must be gone
 * within a second, so every remaining client call gets {@link #URGENT_CLOSE_S} and the JVM halts
 * {@link #URGENT_HALT_S} after the parent was noticed (at most {@link #PARENT_CHECK_MS} late).
 */
final class Lifecycle {
    static final long TICK_MS = 100;
    static final long PARENT_CHECK_MS = 200;
    static final long HARD_EXIT_AFTER_S = 5;
    static final double URGENT_CLOSE_S = 0.4;
    static final double URGENT_HALT_S = 0.75;

    private final Thread main = Thread.currentThread();
    private final long parentPid;
    private final double graceS;
    private final CopyOnWriteArrayList<Runnable> ticks = new CopyOnWriteArrayList<>();
    private volatile boolean stop;
    private volatile boolean blocking;
    private volatile boolean finished;
    private volatile boolean urgent;
    private volatile String reason;

    /**
     * @param expectedParentPid the parent pid the spec names (0: the parent at start)
     * @param graceS            how long a stop may take before blocked calls are interrupted
     */
    Lifecycle(long expectedParentPid, double graceS) {
        this.parentPid = expectedParentPid > 0 ? expectedParentPid : currentParent();
        this.graceS = graceS;
    }

    private static long currentParent() {
        Optional<ProcessHandle> p = ProcessHandle.current().parent();
        return p.map(ProcessHandle::pid).orElse(-1L);
    }

    /** Installs the SIGTERM/SIGINT handlers and starts the ticker thread. */
    @SuppressWarnings("removal")
    Lifecycle start() {
        // sun.misc.Signal (not a shutdown hook): a hook would make SIGTERM exit 143 and race our close.
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), s -> requestStop("SIGTERM", false));
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), s -> requestStop("SIGINT", false));
        Thread t = new Thread(this::tickLoop, "kp-ticker");
        t.setDaemon(true);
        t.start();
        return this;
    }

    /** Adds periodic work, run every {@link #TICK_MS} on the ticker thread. */
    void onTick(Runnable r) {
        ticks.add(r);
    }

    private void tickLoop() {
        long lastParentCheck = 0;
        while (!finished) {
            for (Runnable r : ticks) {
                try {
                    r.run();
                } catch (RuntimeException e) {
                    Log.warn("periodic task failed: " + e);
                }
            }
            long now = System.nanoTime();
            if (!stop && now - lastParentCheck >= TimeUnit.MILLISECONDS.toNanos(PARENT_CHECK_MS)) {
                lastParentCheck = now;
                long p = currentParent();
                if (p != parentPid) {
                    requestStop("parent process " + parentPid + " is gone", true);
                }
            }
            try {
                Thread.sleep(TICK_MS);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /** True once a stop was requested. */
    boolean stopping() {
        return stop;
    }

    String reason() {
        return reason;
    }

    /** Sleeps until {@code deadlineNs} ({@link System#nanoTime()}), in steps of at most 50 ms so a stop request
     * ends it early; an interrupt ends it too (processing time, a held-back acknowledgement's lock wait). */
    void sleepUntil(long deadlineNs) {
        while (!stop) {
            long left = deadlineNs - System.nanoTime();
            if (left <= 0) {
                return;
            }
            try {
                Thread.sleep(Math.min(50, Math.max(1, left / 1_000_000L)));
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    /**
     * How long a client call after the stop request may take (close, a final commit): {@code dflt}, or
     * {@link #URGENT_CLOSE_S} when the parent died.
     */
    double closeTimeoutS(double dflt) {
        return urgent ? Math.min(dflt, URGENT_CLOSE_S) : dflt;
    }

    /** Asks the worker to stop (urgent: the parent is gone, exit within a second); idempotent. */
    void requestStop(String why, boolean urgentStop) {
        if (stop) {
            return;
        }
        reason = why;
        urgent = urgentStop;
        stop = true;
        Log.info("stopping: " + why);
        if (blocking) {
            main.interrupt();
        }
        double grace = urgentStop ? URGENT_CLOSE_S + 0.1 : graceS;
        double hard = urgentStop ? URGENT_HALT_S - grace : HARD_EXIT_AFTER_S;
        Thread t = new Thread(() -> {
            sleepS(grace);
            if (!finished && blocking) {
                Log.warn("still blocked in a client call " + grace + " s after the stop request: interrupting it");
                main.interrupt();
            }
            sleepS(hard);
            halt("did not finish within " + (grace + hard) + " s of the stop request (" + why + ")");
        }, "kp-stop-timer");
        t.setDaemon(true);
        t.start();
    }

    /** Halts the JVM {@code seconds} from now unless the worker has finished by then. */
    void armWatchdog(double seconds, String what) {
        Thread t = new Thread(() -> {
            sleepS(seconds);
            halt(what + " did not finish within " + seconds + " s");
        }, "kp-watchdog");
        t.setDaemon(true);
        t.start();
    }

    private void halt(String why) {
        if (finished) {
            return;
        }
        Log.error("halting: " + why);
        System.err.flush();
        Runtime.getRuntime().halt(3);
    }

    private static void sleepS(double s) {
        try {
            Thread.sleep((long) (s * 1000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Marks the main thread as inside a client call that a stop request should interrupt. */
    void blocking(boolean b) {
        blocking = b;
        if (!b) {
            Thread.interrupted();  // an interrupt that arrived just after the call returned must not leak
        }
    }

    /** Everything is written: the watchdogs stand down. */
    void finished() {
        finished = true;
    }
}
