// A Java client of gpuledger written from README.md, docs/contract.md and schemas/json alone, with
// no NATS library: the NATS client protocol over one socket (INFO, CONNECT, SUB, PUB/HPUB, MSG/HMSG),
// JetStream by its wire subjects. What a team with only the JDK meets (tests/outsider/test_java_client.py).
//
//   java GpuledgerClient.java PUBLISHER_URL SYSTEM_URL SYSTEM
//
// As the `publisher` user: submit on gpu.intake.claim with Nats-Msg-Id (a repeat is a duplicate),
// watch gpu.outcome.claim.<token> and read it by direct get, read why a claim is pending, try a
// release (nats-server refuses it). As the system's own user: submit on gpu.intake.claim.<system>
// with a lease, renew it, release it (twice). Prints one JSON object of what it saw.
import java.io.*;
import java.net.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

public class GpuledgerClient {
    // --- a tiny JSON reader and writer (the JDK has none) ----------------------------------------
    static final class Json {
        final String s; int i;
        Json(String s) { this.s = s; }
        static Object parse(String s) { Json j = new Json(s); Object v = j.value(); j.ws(); return v; }
        void ws() { while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++; }
        Object value() {
            ws();
            char c = s.charAt(i);
            if (c == '{') { i++; Map<String, Object> m = new LinkedHashMap<>(); ws();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) { ws(); String k = (String) value(); ws(); i++; m.put(k, value()); ws();
                    if (s.charAt(i++) == '}') return m; } }
            if (c == '[') { i++; List<Object> l = new ArrayList<>(); ws();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) { l.add(value()); ws(); if (s.charAt(i++) == ']') return l; } }
            if (c == '"') { i++; StringBuilder b = new StringBuilder();
                while (true) { char d = s.charAt(i++);
                    if (d == '"') return b.toString();
                    if (d != '\\') { b.append(d); continue; }
                    char e = s.charAt(i++);
                    switch (e) { case 'n': b.append('\n'); break; case 't': b.append('\t'); break;
                        case 'r': b.append('\r'); break; case 'b': b.append('\b'); break; case 'f': b.append('\f'); break;
                        case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                        default: b.append(e); } } }
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            if (s.startsWith("null", i)) { i += 4; return null; }
            int start = i; while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            return Double.parseDouble(s.substring(start, i));
        }
        static String write(Object v) {
            if (v == null) return "null";
            if (v instanceof String) { StringBuilder b = new StringBuilder("\"");
                for (char c : ((String) v).toCharArray()) {
                    if (c == '"' || c == '\\') b.append('\\').append(c);
                    else if (c < 0x20) b.append(String.format("\\u%04x", (int) c)); else b.append(c); }
                return b.append('"').toString(); }
            if (v instanceof Map) { StringJoiner j = new StringJoiner(",", "{", "}");
                for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) j.add(write(e.getKey()) + ":" + write(e.getValue()));
                return j.toString(); }
            if (v instanceof List) { StringJoiner j = new StringJoiner(",", "[", "]");
                for (Object o : (List<?>) v) j.add(write(o)); return j.toString(); }
            if (v instanceof Double && ((Double) v) == Math.rint((Double) v)) return String.valueOf(((Double) v).longValue());
            return String.valueOf(v);
        }
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int k = 0; k < kv.length; k += 2) m.put((String) kv[k], kv[k + 1]);
        return m;
    }

    @SuppressWarnings("unchecked") static Map<String, Object> map(Object o) { return (Map<String, Object>) o; }

    // --- one NATS connection -----------------------------------------------------------------------
    static final class Msg {
        final String subject; final String status; final Map<String, String> headers; final String body;
        Msg(String subject, String status, Map<String, String> headers, String body) {
            this.subject = subject; this.status = status; this.headers = headers; this.body = body; }
    }

    static final class Nats implements Closeable {
        final Socket socket; final InputStream in; final OutputStream out; final String inbox;
        final Map<Integer, BlockingQueue<Msg>> subs = new ConcurrentHashMap<>();
        final BlockingQueue<String> errors = new LinkedBlockingQueue<>();
        int nextSid = 1, nextReply = 1;

        // docs/contract.md: a system must use the inbox prefix `_INBOX_system-<name>`, the publisher `_INBOX`
        Nats(String url, String inboxPrefix) throws IOException {
            URI uri = URI.create(url);
            String[] userPass = uri.getUserInfo().split(":", 2);
            socket = new Socket(uri.getHost(), uri.getPort());
            in = new BufferedInputStream(socket.getInputStream());
            out = socket.getOutputStream();
            inbox = inboxPrefix + "." + UUID.randomUUID().toString().replace("-", "");
            line();  // INFO {...}
            Map<String, Object> connect = obj("user", URLDecoder.decode(userPass[0], StandardCharsets.UTF_8),
                    "pass", URLDecoder.decode(userPass[1], StandardCharsets.UTF_8), "headers", true,
                    "no_responders", true, "verbose", false, "pedantic", false, "protocol", 1.0, "lang", "java-raw");
            send("CONNECT " + Json.write(connect) + "\r\nPING\r\n");
            String reply = line();
            if (!reply.startsWith("PONG")) throw new IOException("server said " + reply);
            Thread reader = new Thread(this::readLoop); reader.setDaemon(true); reader.start();
        }

        synchronized void send(String s) throws IOException { out.write(s.getBytes(StandardCharsets.UTF_8)); out.flush(); }

        String line() throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            int c; while ((c = in.read()) != -1 && c != '\n') if (c != '\r') b.write(c);
            if (c == -1 && b.size() == 0) throw new EOFException();
            return b.toString(StandardCharsets.UTF_8);
        }

        void readLoop() {
            try {
                while (true) {
                    String l = line();
                    if (l.startsWith("PING")) { send("PONG\r\n"); continue; }
                    if (l.startsWith("-ERR")) { errors.add(l); continue; }
                    if (!l.startsWith("MSG ") && !l.startsWith("HMSG ")) continue;
                    String[] p = l.split(" ");
                    boolean hasHeaders = p[0].equals("HMSG");
                    int total = Integer.parseInt(p[p.length - 1]);
                    int headerLen = hasHeaders ? Integer.parseInt(p[p.length - 2]) : 0;
                    byte[] data = in.readNBytes(total); in.readNBytes(2);
                    String status = "";
                    Map<String, String> headers = new LinkedHashMap<>();
                    if (hasHeaders) {
                        String[] lines = new String(data, 0, headerLen, StandardCharsets.UTF_8).split("\r\n");
                        String[] first = lines[0].split(" ", 3);  // NATS/1.0 [status [description]]
                        if (first.length > 1) status = first[1];
                        for (int k = 1; k < lines.length; k++) {
                            int colon = lines[k].indexOf(':');
                            if (colon > 0) headers.put(lines[k].substring(0, colon).trim(), lines[k].substring(colon + 1).trim());
                        }
                    }
                    String body = new String(data, headerLen, total - headerLen, StandardCharsets.UTF_8);
                    BlockingQueue<Msg> q = subs.get(Integer.parseInt(p[2]));
                    if (q != null) q.add(new Msg(p[1], status, headers, body));
                }
            } catch (IOException e) { errors.add("closed: " + e); }
        }

        BlockingQueue<Msg> subscribe(String subject) throws IOException {
            int sid = nextSid++;
            BlockingQueue<Msg> q = new LinkedBlockingQueue<>();
            subs.put(sid, q);
            send("SUB " + subject + " " + sid + "\r\n");
            return q;
        }

        // PUB, or HPUB when there are headers; with a reply subject for a request
        void publish(String subject, String reply, Map<String, String> headers, String body) throws IOException {
            byte[] payload = body.getBytes(StandardCharsets.UTF_8);
            String r = reply == null ? "" : " " + reply;
            if (headers == null || headers.isEmpty()) {
                send("PUB " + subject + r + " " + payload.length + "\r\n" + body + "\r\n");
                return;
            }
            StringBuilder h = new StringBuilder("NATS/1.0\r\n");
            headers.forEach((k, v) -> h.append(k).append(": ").append(v).append("\r\n"));
            h.append("\r\n");
            int hl = h.toString().getBytes(StandardCharsets.UTF_8).length;
            send("HPUB " + subject + r + " " + hl + " " + (hl + payload.length) + "\r\n" + h + body + "\r\n");
        }

        // a request: a fresh reply subject under this connection's inbox, one answer
        Msg request(String subject, Map<String, String> headers, String body, long timeoutMs) throws Exception {
            String reply = inbox + "." + (nextReply++);
            BlockingQueue<Msg> q = subscribe(reply);
            publish(subject, reply, headers, body);
            Msg m = q.poll(timeoutMs, TimeUnit.MILLISECONDS);
            if (m == null) {
                String err = errors.poll(200, TimeUnit.MILLISECONDS);
                return new Msg(subject, err != null ? "ERR" : "TIMEOUT", Map.of(), err != null ? err : "");
            }
            return m;
        }

        public void close() throws IOException { socket.close(); }
    }

    // --- gpuledger, as docs/contract.md says it ----------------------------------------------------
    static String token(String id) { return id.replaceAll("[^A-Za-z0-9_:-]", "_"); }

    static Map<String, Object> publishClaim(Nats nc, String subject, Map<String, Object> claim) throws Exception {
        // "Publish the JSON claim to gpu.intake.claim through JetStream with Nats-Msg-Id = the claim id"
        Msg ack = nc.request(subject, Map.of("Nats-Msg-Id", (String) claim.get("claim_id")), Json.write(claim), 10000);
        return map(Json.parse(ack.body));
    }

    // wait on a subscription for an outcome that `want` accepts; every outcome seen, in order
    static Map<String, Object> outcomeWhen(BlockingQueue<Msg> sub, List<String> seen,
                                           java.util.function.Predicate<Map<String, Object>> want) throws Exception {
        long deadline = System.currentTimeMillis() + 60000;
        double lastSeq = -1;
        while (System.currentTimeMillis() < deadline) {
            Msg m = sub.poll(1000, TimeUnit.MILLISECONDS);
            if (m == null) continue;
            Map<String, Object> o = map(Json.parse(m.body));
            if ((Double) o.get("seq") < lastSeq) continue;  // "drop an outcome whose seq is lower than one you have seen"
            lastSeq = (Double) o.get("seq");
            seen.add((String) o.get("status"));
            if (want.test(o)) return o;
        }
        throw new IllegalStateException("no such outcome within 60 s; saw " + seen);
    }

    // "Read the last message on that subject by JetStream direct get ... not found means no outcome yet"
    static Map<String, Object> directGet(Nats nc, String subject) throws Exception {
        for (int tries = 0; tries < 50; tries++) {
            Msg m = nc.request("$JS.API.DIRECT.GET.GPULEDGER_OUTCOMES." + subject, null, "", 5000);
            if (m.status.isEmpty()) {
                Map<String, Object> o = map(Json.parse(m.body));
                o.put("_header_subject", m.headers.get("Nats-Subject"));
                return o;
            }
            if (!m.status.equals("404")) return obj("_status", m.status, "_body", m.body);
            Thread.sleep(100);
        }
        return obj("_status", "404");
    }

    static Map<String, Object> ask(Nats nc, String subject, Map<String, Object> command) throws Exception {
        Msg m = nc.request(subject, null, Json.write(command), 15000);
        if (!m.status.isEmpty()) return obj("_status", m.status, "_error", m.body);
        return map(Json.parse(m.body));
    }

    public static void main(String[] args) throws Exception {
        String publisherUrl = args[0], systemUrl = args[1], system = args[2];
        String run = Long.toString(System.nanoTime() % 1000000000L, 36);
        Map<String, Object> out = new LinkedHashMap<>();

        try (Nats pub = new Nats(publisherUrl, "_INBOX")) {
            // 1. submit with an idempotency key, watching the outcome subject first
            Map<String, Object> claim = obj("claim_id", "java." + run, "namespace", "team-a", "gpus", 2.0,
                                            "models", List.of("H100"));
            String subject = "gpu.outcome.claim." + token((String) claim.get("claim_id"));
            BlockingQueue<Msg> watch = pub.subscribe(subject);
            out.put("ack", publishClaim(pub, "gpu.intake.claim", claim));
            out.put("repeat", publishClaim(pub, "gpu.intake.claim", claim));
            List<String> seen = new ArrayList<>();
            Map<String, Object> held = outcomeWhen(watch, seen, o -> Boolean.TRUE.equals(o.get("final"))
                    || List.of("allocated", "bound").contains(o.get("status")));
            out.put("watched", obj("status", held.get("status"), "devices", (double) ((List<?>) held.get("devices")).size(),
                    "cuda", map(held.get("env")).get("CUDA_VISIBLE_DEVICES"), "claim_id", held.get("claim_id")));
            Map<String, Object> got = directGet(pub, subject);
            out.put("direct", obj("status", got.get("status"), "subject", got.get("_header_subject"),
                    "same_seq", Objects.equals(got.get("seq"), held.get("seq"))));
            out.put("direct_unknown", directGet(pub, "gpu.outcome.claim.java-none-" + run).get("_status"));

            // 2. why a claim is pending: more GPUs than any node has
            Map<String, Object> big = obj("claim_id", "java-big-" + run, "namespace", "team-a", "gpus", 64.0);
            BlockingQueue<Msg> bigWatch = pub.subscribe("gpu.outcome.claim." + token((String) big.get("claim_id")));
            publishClaim(pub, "gpu.intake.claim", big);
            Map<String, Object> pending = outcomeWhen(bigWatch, new ArrayList<>(),
                    o -> "pending".equals(o.get("status")) && !((List<?>) o.get("reasons")).isEmpty());
            List<Object> codes = new ArrayList<>();
            for (Object r : (List<?>) pending.get("reasons")) codes.add(map(r).get("code"));
            out.put("pending", obj("codes", codes, "final", pending.get("final"),
                    "message", map(((List<?>) pending.get("reasons")).get(0)).get("message")));

            // 3. a refusal of the intake, by its outcome: gpus out of range names the field
            Map<String, Object> bad = obj("claim_id", "java-bad-" + run, "namespace", "team-a", "gpus", 65.0);
            BlockingQueue<Msg> badWatch = pub.subscribe("gpu.outcome.claim." + token((String) bad.get("claim_id")));
            publishClaim(pub, "gpu.intake.claim", bad);
            Map<String, Object> refused = outcomeWhen(badWatch, new ArrayList<>(), o -> Boolean.TRUE.equals(o.get("final")));
            out.put("refused", obj("status", refused.get("status"), "code", refused.get("code"),
                    "field", map(((List<?>) refused.get("reasons")).get(0)).get("field")));

            // 4. the publisher may not release (docs/contract.md, Permissions): nats-server says so
            out.put("publisher_release", ask(pub, "gpu.cmd.claim.release", obj("claim_id", claim.get("claim_id"))).get("_status"));
        }

        try (Nats sys = new Nats(systemUrl, "_INBOX_system-" + system)) {
            // 5. a system's claim with a lease: submit, renew, release (twice)
            Map<String, Object> leased = obj("claim_id", system + "-java-" + run, "namespace", "team-b", "gpus", 1.0,
                                             "lease_seconds", 120.0);
            String subject = "gpu.outcome.system." + system + "." + token((String) leased.get("claim_id"));
            BlockingQueue<Msg> watch = sys.subscribe(subject);
            out.put("system_ack", publishClaim(sys, "gpu.intake.claim." + system, leased));
            Map<String, Object> held = outcomeWhen(watch, new ArrayList<>(),
                    o -> List.of("allocated", "bound").contains(o.get("status")) || Boolean.TRUE.equals(o.get("final")));
            out.put("system_held", obj("status", held.get("status"), "system", held.get("system")));
            out.put("system_direct", directGet(sys, subject).get("status"));
            Map<String, Object> renew = ask(sys, "gpu.cmd.claim.renew." + system, obj("claim_id", leased.get("claim_id")));
            out.put("renew", obj("ok", renew.get("ok"), "lease", renew.get("data") == null ? null : map(renew.get("data")).get("lease")));
            Map<String, Object> release = ask(sys, "gpu.cmd.claim.release." + system, obj("claim_id", leased.get("claim_id")));
            out.put("release", obj("ok", release.get("ok"), "status", release.get("data") == null ? null : map(release.get("data")).get("status")));
            Map<String, Object> again = ask(sys, "gpu.cmd.claim.release." + system, obj("claim_id", leased.get("claim_id")));
            out.put("release_again", obj("ok", again.get("ok"), "already", again.get("data") == null ? null : map(again.get("data")).get("already")));
            Map<String, Object> ended = outcomeWhen(watch, new ArrayList<>(), o -> Boolean.TRUE.equals(o.get("final")));
            out.put("system_final", obj("status", ended.get("status"), "code", ended.get("code")));
            Map<String, Object> renewEnded = ask(sys, "gpu.cmd.claim.renew." + system, obj("claim_id", leased.get("claim_id")));
            out.put("renew_ended", renewEnded.get("error"));
        }
        System.out.println(Json.write(out));
    }
}
