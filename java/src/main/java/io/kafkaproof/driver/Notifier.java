package io.kafkaproof.driver;

import java.io.IOException;
import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.SocketException;
import java.nio.charset.StandardCharsets;

/**
 * Tells the runner about events it may trigger faults on: one UDP datagram of JSON each, to the
 * spec's {@code notify} address ({@code "127.0.0.1:PORT"}), from a socket connected to it. Best effort;
 * no address, no datagrams.
 */
final class Notifier {
    private final DatagramSocket socket;
    private final InetSocketAddress target;

    Notifier(String address) {
        DatagramSocket s = null;
        InetSocketAddress t = null;
        if (address != null && !address.isEmpty()) {
            int colon = address.lastIndexOf(':');
            if (colon < 0) {
                throw new Spec.SpecException("notify: expected HOST:PORT, got " + address);
            }
            t = new InetSocketAddress(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1)));
            try {
                // Connected: bound to the address that reaches the runner (loopback) and deaf to other
                // senders. An unconnected socket is bound to every interface (0.0.0.0).
                s = new DatagramSocket((SocketAddress) null);
                s.connect(t);
            } catch (SocketException e) {
                Log.warn("notify: no UDP socket (" + e.getMessage() + "): notifications disabled");
            }
        }
        this.socket = s;
        this.target = t;
    }

    /** Sends one JSON object (already serialised). */
    void send(String json) {
        if (socket == null) {
            return;
        }
        byte[] b = json.getBytes(StandardCharsets.UTF_8);
        try {
            socket.send(new DatagramPacket(b, b.length, target));
        } catch (IOException e) {
            // the runner is gone or busy: notifications are best effort
        }
    }
}
