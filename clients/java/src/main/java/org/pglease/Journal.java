package org.pglease;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * Appends what the server acknowledged, one JSON line per event, in the format of the
 * Python and Node clients (test/clients/check.py reads it).  Each line is one write to a
 * file opened for appending: it survives a SIGKILL.
 */
final class Journal {
    private final FileOutputStream out;
    private final String owner;

    /** path: null for no journal. */
    Journal(String path, String owner) {
        try {
            this.out = path == null ? null : new FileOutputStream(path, true);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        this.owner = owner;
    }

    /** Seconds since the epoch, with milliseconds. */
    static double wallNow() {
        return System.currentTimeMillis() / 1000.0;
    }

    /** One event: name/value pairs (String, Number, Boolean, null, or Map of those). */
    synchronized void write(String ev, Object... fields) {
        if (out == null) {
            return;
        }
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < fields.length; i += 2) {
            sb.append(json(fields[i])).append(": ").append(json(fields[i + 1])).append(", ");
        }
        sb.append("\"ev\": ").append(json(ev)).append(", \"w\": ").append(json(owner))
            .append(", \"t\": ").append(wallNow()).append("}\n");
        try {
            out.write(sb.toString().getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A value as JSON. */
    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        }
        if (v instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            String sep = "";
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                sb.append(sep).append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
                sep = ", ";
            }
            return sb.append('}').toString();
        }
        String s = v.toString();
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
