"""Who may read the dashboard: every page shows every claim of every namespace (labels, devices,
history), and `/metrics` scrapes every service.

Two ways to run it (docs/operations.md, "The dashboard"):
- **On the loopback interface without a login** (`gpuledger up`, the default 127.0.0.1). Binding
  there keeps other hosts out, not other sites' pages in an operator's browser: a page of
  `evil.example` whose name is made to resolve to 127.0.0.1 (DNS rebinding) is same-origin with
  itself and read every page, the browser sending `Host: evil.example`. So without a login only
  loopback names are answered (`localhost`, `*.localhost`, `127.x.y.z`, `[::1]`).
- **With a login**: `GPULEDGER_DASHBOARD_TOKEN` (a secret from the env file, like the NATS
  passwords) is asked of every page as HTTP Basic's password (any user name: the browser asks
  once) or as `Authorization: Bearer TOKEN` (curl, Prometheus). Required when it binds anything
  but loopback (docker-compose binds 0.0.0.0 in its container, reached by every container on its
  network): such a start without a token stops, naming the variable.

`/healthz` stays open (container health checks; it tells the last sequence folded) and so do the
static files (the repository's own CSS and script).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from shared.httpserve import Handler, Request, Response, foreign_host, is_loopback

TOKEN_ENV = "GPULEDGER_DASHBOARD_TOKEN"
MIN_TOKEN = 16
REALM = 'Basic realm="gpuledger dashboard", charset="UTF-8"'


@dataclass(frozen=True)
class Login:
    token: str | None  # None: no login, loopback names only

    @classmethod
    def from_env(cls, bind_host: str, env: Mapping[str, str]) -> Login:
        token = env.get(TOKEN_ENV, "").strip() or None
        if token is not None and len(token) < MIN_TOKEN:
            raise SystemExit(f"{TOKEN_ENV} must be at least {MIN_TOKEN} characters (a secret, e.g. "
                             f"`openssl rand -hex 16`), got {len(token)}")
        if token is None and not is_loopback(bind_host):
            raise SystemExit(
                f"GPULEDGER_DASHBOARD_HOST={bind_host!r} is reachable from other machines (or containers), "
                f"and the dashboard shows every claim of every namespace: set {TOKEN_ENV} (its login, "
                "at least 16 characters, e.g. `openssl rand -hex 16`), or bind 127.0.0.1")
        return cls(token)

    def refusal(self, request: Request) -> Response | None:
        """None when the request may be answered, else the answer that says why not."""
        if self.token is None:
            host = foreign_host(request)
            if host is None:
                return None
            return Response(
                f"this dashboard has no login and answers only loopback names (127.0.0.1, localhost), "
                f"not Host {host[:80]!r}: a page of another site can reach it under such a name (DNS "
                f"rebinding). To serve it under other names, set {TOKEN_ENV}.\n", 403)
        if self._presented(request.headers.get("authorization", "")):
            return None
        return Response(f"login required: the dashboard's token ({TOKEN_ENV}) as the password, any user "
                        "name, or `Authorization: Bearer TOKEN`\n", 401, headers={"WWW-Authenticate": REALM})

    def _presented(self, header: str) -> bool:
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer":
            given = value
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(value, validate=True).decode("utf-8").partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return False
        else:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def guard(self, handler: Handler) -> Handler:
        async def guarded(request: Request):
            refused = self.refusal(request)
            return refused if refused is not None else await handler(request)

        return guarded
