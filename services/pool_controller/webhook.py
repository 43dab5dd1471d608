"""A small HTTP/1.1 (HTTPS with a cert and key) server for the admission webhook, stdlib only.

POST /mutate and POST /validate take an AdmissionReview JSON body and answer one; GET /healthz
answers 200 while the process serves (liveness); GET /readyz answers 503 until the controller's
fold has read the log it found at start (readiness: a replica that would admit pods against a
half-read log stays out of the Service until then). The Kubernetes API server sends Content-Length bodies over keep-alive connections,
which is all this needs to speak.

A review names any GpuClaim in any namespace and is answered with its node, devices or pending
reasons, so /mutate and /validate answer only the API server (`CallerCheck`): a client
certificate signed by a configured CA (the API server presents one from its
AdmissionConfiguration's kubeconfig) and/or a bearer token from that kubeconfig. The probes
(/healthz, /readyz) say nothing of any claim and stay open: the kubelet presents neither.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gpuledger.admission")

MAX_BODY = 8 * 1024 * 1024
# A connection may wait this long for its next request (the API server keeps them alive between
# reviews), and a request, once begun, must arrive whole within READ_TIMEOUT_S: the API server sends
# each review at once (and gives up on the webhook after its own timeout, 10 s by default), so a
# client that trickles a request holds a connection for no longer than that.
IDLE_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 10.0
Handler = Callable[[str, dict], dict]  # (path, AdmissionReview) -> AdmissionReview
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


LOOPBACK = ("127.0.0.1", "::1", "localhost")
PROBES = ("/healthz", "/readyz")  # the kubelet's: open, they say nothing of any claim


class AdmissionConfigError(ValueError):
    pass


def admission_listen(host: str, cert_file: str, key_file: str, insecure: bool,
                     client_ca: str = "") -> tuple[str, ssl.SSLContext | None]:
    """Where and how the webhook listens: HTTPS (every interface unless `host`), or, only when
    asked for explicitly (development), plain HTTP on the loopback interface. A pod's spec and the
    admission verdict must not cross a network in the clear, nor may anyone on it answer for us.
    With `client_ca` the TLS handshake asks for a client certificate and verifies one against it."""
    if client_ca and not (cert_file or key_file):
        raise AdmissionConfigError("GPULEDGER_ADMISSION_CLIENT_CA needs TLS: set GPULEDGER_ADMISSION_TLS_CERT "
                                   "and GPULEDGER_ADMISSION_TLS_KEY as well")
    tls = tls_context(cert_file, key_file, client_ca)
    if tls is not None:
        return host or "0.0.0.0", tls
    if not insecure:
        raise AdmissionConfigError(
            "the admission webhook needs TLS: set GPULEDGER_ADMISSION_TLS_CERT and "
            "GPULEDGER_ADMISSION_TLS_KEY (`gpuledger webhook certs` makes them), or "
            "GPULEDGER_ADMISSION_INSECURE=1 to serve plain HTTP on 127.0.0.1 for development")
    if host and host not in LOOPBACK:
        raise AdmissionConfigError(
            f"GPULEDGER_ADMISSION_HOST={host}: plain HTTP (GPULEDGER_ADMISSION_INSECURE=1) is served on "
            f"127.0.0.1 only; give GPULEDGER_ADMISSION_TLS_CERT and _KEY to serve on {host}")
    return host or "127.0.0.1", None


def tls_context(cert_file: str, key_file: str, client_ca: str = "") -> ssl.SSLContext | None:
    """A server TLS context when both files are given; None when neither is. With `client_ca`, a
    client certificate is asked for and, when one is presented, verified against that CA (a bad
    one fails the handshake). It stays optional in the handshake so that the kubelet's probes,
    which present none, still reach /healthz and /readyz; the reviews check for it (`CallerCheck`)."""
    if not cert_file and not key_file:
        return None
    if not (cert_file and key_file):
        raise AdmissionConfigError("GPULEDGER_ADMISSION_TLS_CERT and GPULEDGER_ADMISSION_TLS_KEY go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as err:
            raise AdmissionConfigError(f"GPULEDGER_ADMISSION_CLIENT_CA={client_ca}: cannot read a CA "
                                       f"certificate there ({err})") from None
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


@dataclass(frozen=True)
class CallerCheck:
    """Who may ask for a review. `client_ca`: a client certificate verified by the handshake
    counts, if it names one of `client_names` (its CN or a DNS name; empty: any the CA signed).
    `tokens`: an `Authorization: Bearer <token>` header with one of them counts. `anyone`: no
    check at all (GPULEDGER_ADMISSION_UNAUTHENTICATED=1, or plain HTTP on loopback)."""

    client_ca: bool = False
    client_names: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()
    anyone: bool = False

    def refusal(self, peercert: dict | None, authorization: str) -> tuple[int, str] | None:
        """None when the caller may ask; else (HTTP status, why) for its answer."""
        if self.anyone:
            return None
        # a certificate is here only if the handshake verified it against the CA
        names = certificate_names(peercert) if self.client_ca and peercert else None
        if names is not None and (not self.client_names or set(names) & set(self.client_names)):
            return None
        scheme, _, presented = authorization.partition(" ")
        if self.tokens and scheme.lower() == "bearer" and presented.strip():
            given = presented.strip().encode()
            if any(hmac.compare_digest(given, token.encode()) for token in self.tokens):
                return None
            return 401, "the bearer token is not the one this webhook was given (GPULEDGER_ADMISSION_TOKEN_FILE)"
        if names is not None:
            return 403, (f"the client certificate names {', '.join(names) or 'nothing'}, none of "
                         f"GPULEDGER_ADMISSION_CLIENT_NAMES ({', '.join(self.client_names)})")
        wanted = " or ".join(w for w, on in (
            ("a client certificate signed by GPULEDGER_ADMISSION_CLIENT_CA", self.client_ca),
            ("the bearer token of GPULEDGER_ADMISSION_TOKEN_FILE", bool(self.tokens))) if on)
        return 401, (f"the admission webhook answers the Kubernetes API server only: present {wanted} "
                     "(the API server's AdmissionConfiguration kubeconfig; docs/kubernetes.md)")


ANYONE = CallerCheck(anyone=True)


def certificate_names(peercert: dict) -> list[str]:
    """The CN and DNS names of a certificate as `ssl.SSLSocket.getpeercert()` gives it."""
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    names += [value for key, value in peercert.get("subjectAltName", ()) if key == "DNS"]
    return list(dict.fromkeys(names))


def caller_check(client_ca: str, client_names: tuple[str, ...], token_file: str, unauthenticated: bool,
                 tls: bool) -> CallerCheck:
    """The check the settings ask for. Over TLS one of a client CA, a token or the explicit
    opt-out is required; plain HTTP (loopback, development) takes a token if given, else anyone."""
    tokens: tuple[str, ...] = ()
    if token_file:
        try:
            token = open(token_file, encoding="utf-8").read().strip()
        except OSError as err:
            raise AdmissionConfigError(f"GPULEDGER_ADMISSION_TOKEN_FILE={token_file}: {err.strerror or err}") from None
        if len(token) < 16:
            raise AdmissionConfigError(f"GPULEDGER_ADMISSION_TOKEN_FILE={token_file}: the token must be at least "
                                       f"16 characters, got {len(token)}")
        tokens = (token,)
    if client_names and not client_ca:
        raise AdmissionConfigError("GPULEDGER_ADMISSION_CLIENT_NAMES needs GPULEDGER_ADMISSION_CLIENT_CA")
    if unauthenticated:
        if client_ca or tokens:
            raise AdmissionConfigError("GPULEDGER_ADMISSION_UNAUTHENTICATED=1 contradicts GPULEDGER_ADMISSION_CLIENT_CA "
                                       "/ _TOKEN_FILE: give the one you mean")
        return ANYONE
    if client_ca or tokens:
        return CallerCheck(bool(client_ca), tuple(client_names), tokens)
    if not tls:
        return ANYONE
    raise AdmissionConfigError(
        "the admission webhook must know its caller (any pod reaching it could read every GpuClaim's node "
        "and devices): set GPULEDGER_ADMISSION_CLIENT_CA (the CA of the API server's client certificate; "
        "`gpuledger webhook certs` makes both) and/or GPULEDGER_ADMISSION_TOKEN_FILE (a bearer token the API "
        "server sends), or GPULEDGER_ADMISSION_UNAUTHENTICATED=1 to answer anyone (say, behind a "
        "NetworkPolicy that admits only the API server)")


def _always() -> bool:
    return True


async def start_webhook(handler: Handler, host: str, port: int, tls: ssl.SSLContext | None = None,
                        ready: Callable[[], bool] = _always, caller: CallerCheck = ANYONE) -> asyncio.Server:
    """Listen on host:port (port 0 picks a free one: read it from `server.sockets`). `caller`
    decides who may ask for a review (the service passes what its settings ask for)."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await _serve_one(reader, writer, handler, ready, caller):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_connection, host, port, ssl=tls, limit=64 * 1024)


async def _serve_one(reader, writer, handler: Handler, ready: Callable[[], bool] = _always,
                     caller: CallerCheck = ANYONE) -> bool:
    """Answer one request; False when the connection should close."""
    first = await asyncio.wait_for(reader.read(1), IDLE_TIMEOUT_S)  # idle: closed without a word
    if not first:
        return False
    try:
        head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
    except asyncio.LimitOverrunError:
        await _send(writer, 431, {"error": "request head over 64 KiB"}, False)
        return False
    except asyncio.TimeoutError:
        await _send(writer, 408, {"error": f"request head not complete within {READ_TIMEOUT_S:g} s"}, False)
        return False
    method, path, headers = _parse_head(head)
    keep_alive = headers.get("connection", "").lower() != "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        await _send(writer, 411, {"error": "send a Content-Length body"}, False)
        return False
    length_text = headers.get("content-length", "0").strip() or "0"
    if length_text.isascii() and length_text.isdigit() and len(length_text) > 12:
        await _send(writer, 413, {"error": f"body over {MAX_BODY} bytes"}, False)
        return False
    if not (length_text.isascii() and length_text.isdigit()):
        await _send(writer, 400, {"error": f"Content-Length must be a whole number of bytes, got {length_text[:40]!r}"},
                    False)
        return False
    length = int(length_text)
    if length > MAX_BODY:
        await _send(writer, 413, {"error": f"body over {MAX_BODY} bytes"}, False)
        return False
    try:
        body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
    except asyncio.TimeoutError:
        await _send(writer, 408, {"error": f"body of {length} bytes not complete within {READ_TIMEOUT_S:g} s"}, False)
        return False
    refused = None if path in PROBES else caller.refusal(writer.get_extra_info("peercert"),
                                                          headers.get("authorization", ""))
    if refused is not None:
        status, why = refused
        _say_refused(path, writer.get_extra_info("peername"), why)
        await _send(writer, status, {"error": why}, keep_alive)
        return keep_alive
    status, answer = _route(method, path, body, handler, ready)
    await _send(writer, status, answer, keep_alive)
    return keep_alive


_refused = [0]


def _say_refused(path: str, peer: object, why: str) -> None:
    """Log refused callers: the 1st, 2nd, 4th, 8th... and every 1000th (one that keeps asking fills
    no disk)."""
    _refused[0] += 1
    count = _refused[0]
    if count & (count - 1) == 0 or count % 1000 == 0:  # 1, 2, 4, 8, ... then every 1000th
        log.warning("admission webhook: refused a request for %s from %s (%d refused so far): %s",
                    path[:100], peer, count, why)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return method, target.split("?", 1)[0], headers


def _route(method: str, path: str, body: bytes, handler: Handler,
           ready: Callable[[], bool] = _always) -> tuple[int, dict]:
    if path == "/healthz":
        return 200, {"status": "ok"}
    if path == "/readyz":
        return (200, {"status": "ok"}) if ready() else (503, {"status": "catching up with the log"})
    if path not in ("/mutate", "/validate"):
        return 404, {"error": f"no such path {path}; use /mutate or /validate"}
    if method != "POST":
        return 405, {"error": "POST an AdmissionReview"}
    try:
        review = json.loads(body)
    except ValueError as err:
        return 400, {"error": f"body is not JSON: {err}"}
    except RecursionError:  # Python's json recurses once per level; an AdmissionReview is a few deep
        return 400, {"error": "body is nested too deeply to be an AdmissionReview"}
    try:
        return 200, handler(path, review)
    except Exception as err:  # a bug answers 500-style denial rather than dropping the API call
        log.exception("admission failed")
        uid = (review.get("request") or {}).get("uid", "") if isinstance(review, dict) else ""
        return 200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "response": {"uid": uid, "allowed": False,
                                  "status": {"code": 500, "message": f"internal error: {err}"}}}


async def _send(writer, status: int, answer: dict, keep_alive: bool) -> None:
    body = json.dumps(answer).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    writer.write(head.encode() + body)
    await writer.drain()
