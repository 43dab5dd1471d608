"""Webhook certificates: a private CA and a serving certificate for the webhook's Service names.

The API server reaches the webhook as `<service>.<namespace>.svc` and checks its certificate
against the webhook configuration's caBundle: so the CA's certificate goes into the caBundle and
the serving certificate (with every name the Service answers to) into the Secret the pods mount.
EC P-256 keys; the CA for 10 years, the serving certificate for one (re-run to renew).

The same CA signs a client certificate (`CLIENT_NAME`, client use only) for the API server to
present to the webhook (its AdmissionConfiguration kubeconfig): the webhook then answers only a
caller holding it (GPULEDGER_ADMISSION_CLIENT_CA = ca.crt, _CLIENT_NAMES = `CLIENT_NAME`). The
serving certificate cannot stand in for it: it is for server use only and names no client.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


CLIENT_NAME = "gpuledger-admission-client"


@dataclass(frozen=True)
class WebhookCerts:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    client_cert_pem: bytes = b""  # the API server's, to present to the webhook
    client_key_pem: bytes = b""


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def generate(service: str, namespace: str, now: datetime.datetime | None = None,
             days: int = 365) -> WebhookCerts:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpuledger webhook CA ({namespace})")])
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), now, 3650)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = service_names(service, namespace)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])])
    cert = (_builder(subject, ca_name, key.public_key(), now, days)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CLIENT_NAME)]), ca_name,
                       client_key.public_key(), now, days)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return WebhookCerts(ca.public_bytes(pem), cert.public_bytes(pem), _private(key),
                        client.public_bytes(pem), _private(client_key))


def _private(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject, issuer, public_key, now, days) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))
