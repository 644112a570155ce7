package io.kafkaproof.driver;

import java.util.Random;

/** Record keys as workload.KeyChooser: none, one fixed key, {@code count} keys uniformly, or sequentially. */
final class KeyChooser {
    private final String distribution;
    private final long count;
    private final String key;

    KeyChooser(Spec keys) {
        this.distribution = keys == null ? "none" : keys.str("distribution", "none");
        this.count = keys == null ? 1 : Math.max(1, keys.lng("count", 1));
        this.key = keys == null ? "key" : keys.str("key", "key");
        switch (distribution) {
            case "none": case "single": case "uniform": case "sequential":
                break;
            default:
                throw new Spec.SpecException("keys.distribution: unknown '" + distribution
                        + "'; allowed: none, single, uniform, sequential");
        }
    }

    /** The key of value {@code seq}, or null. */
    String choose(long seq, Random rng) {
        switch (distribution) {
            case "none":
                return null;
            case "single":
                return key;
            case "sequential":
                return "k" + (seq % count);
            default:
                return "k" + (count <= Integer.MAX_VALUE ? rng.nextInt((int) count) : Math.floorMod(rng.nextLong(), count));
        }
    }
}
