package org.pglease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Rules.java classifies every case of test/clients/rules_cases.json, and every notice of
 * notice_cases.json, as docs/client-rules.md says.
 */
class RulesTest {
    /**
     * The cases of test/clients/FILE (a JSON array of arrays, shared by every client's test),
     * or of the file the system property names; at least atLeast of them.
     */
    @SuppressWarnings("unchecked")
    static List<List<Object>> cases(String property, String file, int atLeast) throws Exception {
        String path = System.getProperty(property, "../../test/clients/" + file);
        List<Object> cases = Json.parse(Files.readString(Path.of(path)));
        assertTrue(cases.size() >= atLeast, "at least " + atLeast + " cases in " + path);
        List<List<Object>> out = new ArrayList<>();
        for (Object c : cases) {
            out.add((List<Object>) c);
        }
        return out;
    }

    /** One case per dynamic test: [sqlstate or null, message or null, kind]. */
    @TestFactory
    Stream<DynamicTest> rulesCases() throws Exception {
        List<DynamicTest> tests = new ArrayList<>();
        for (List<Object> kase : cases("pglease.rules", "rules_cases.json", 20)) {
            String code = (String) kase.get(0);
            String message = (String) kase.get(1);
            String kind = (String) kase.get(2);
            String name = "rules case " + code + " " + (message == null ? "(no message)"
                : message.split("\n")[0].substring(0, Math.min(60, message.split("\n")[0].length()))) + " -> " + kind;
            tests.add(DynamicTest.dynamicTest(name, () -> assertEquals(kind, Rules.classify(code, message).label())));
        }
        return tests.stream();
    }

    /** One notice per dynamic test: [severity, SQLSTATE, message or null, "ambiguous" or "ignore"]. */
    @TestFactory
    Stream<DynamicTest> noticeCases() throws Exception {
        List<DynamicTest> tests = new ArrayList<>();
        for (List<Object> kase : cases("pglease.notices", "notice_cases.json", 5)) {
            String severity = (String) kase.get(0);
            String message = (String) kase.get(2);
            String kind = (String) kase.get(3);
            String name = "notice case " + severity + " " + (message == null ? "(no message)"
                : message.substring(0, Math.min(60, message.length()))) + " -> " + kind;
            tests.add(DynamicTest.dynamicTest(name, () -> assertEquals(kind.equals("ambiguous"),
                                                                       Rules.ambiguousNotice(severity, message))));
        }
        return tests.stream();
    }

    @Test
    void libpqUrlsBecomeJdbcUrls() {
        assertEquals("jdbc:postgresql://localhost:5433/db?user=w&socketFactory=org.pglease.UnixSocketFactory"
                     + "&socketFactoryArg=%2Ftmp%2Fs&sslmode=disable",
                     Session.jdbcUrl("postgresql:///db?host=/tmp/s&port=5433&user=w"));
        assertEquals("jdbc:postgresql://localhost:5432/db?user=me&socketFactory=org.pglease.UnixSocketFactory"
                     + "&socketFactoryArg=%2Fvar%2Frun%2Fpostgresql&sslmode=disable",
                     Session.jdbcUrl("postgresql://me@/db"));
        assertEquals("jdbc:postgresql://db.example:6432/orders?sslmode=require&password=p%40ss&user=u",
                     Session.jdbcUrl("postgres://u:p%40ss@db.example:6432/orders?sslmode=require"));
        assertEquals("jdbc:postgresql://h/d", Session.jdbcUrl("jdbc:postgresql://h/d"));
    }

    /** Just enough JSON for the cases file: arrays, strings, null. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        @SuppressWarnings("unchecked")
        static List<Object> parse(String text) {
            return (List<Object>) new Json(text).value();
        }

        private void space() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }

        private Object value() {
            space();
            char c = s.charAt(i);
            if (c == '[') {
                i++;
                List<Object> out = new ArrayList<>();
                space();
                if (s.charAt(i) == ']') {
                    i++;
                    return out;
                }
                while (true) {
                    out.add(value());
                    space();
                    if (s.charAt(i++) == ']') {
                        return out;
                    }
                }
            }
            if (s.startsWith("null", i)) {
                i += 4;
                return null;
            }
            if (c != '"') {
                throw new IllegalArgumentException("unexpected " + c + " at " + i);
            }
            StringBuilder sb = new StringBuilder();
            for (i++; s.charAt(i) != '"'; i++) {
                char d = s.charAt(i);
                if (d == '\\') {
                    d = s.charAt(++i);
                    switch (d) {
                        case 'n': sb.append('\n'); break;
                        case 't': sb.append('\t'); break;
                        case 'u': sb.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16)); i += 4; break;
                        default: sb.append(d);
                    }
                } else {
                    sb.append(d);
                }
            }
            i++;
            return sb.toString();
        }
    }
}
