"""`gpuledger webhook certs`: the pod webhook's TLS Secret and its MutatingWebhookConfiguration
with the caBundle filled, as YAML for `kubectl apply -f -` (or applied directly with --apply), and
the API server's client credentials for the webhook (a Secret holding its AdmissionConfiguration
and kubeconfig, to copy to the control plane: docs/kubernetes.md)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Optional

import typer
import yaml

from services.pool_controller.webhook_config import (
    ADMISSION_CONFIG_FILE, KUBECONFIG_FILE, admission_configuration, admission_kubeconfig, client_secret,
    mutating_webhook, tls_secret)
from shared.certs import generate
from shared.settings import Settings

webhook_app = typer.Typer(help="The pod admission webhook on Kubernetes.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")


@webhook_app.command("certs")
def certs(namespace: str = typer.Option("gpuledger", "--namespace", "-n", help="Namespace of the "
                                        "pool-controller Service and the Secret."),
          service: str = typer.Option("pool-controller", "--service", help="The webhook's Service."),
          secret: str = typer.Option("gpuledger-admission-tls", "--secret", help="Name of the TLS "
                                     "Secret the pool-controller mounts."),
          client_secret_name: str = typer.Option("gpuledger-admission-client", "--client-secret",
                                                 help="Name of the Secret that holds the API server's "
                                                 "AdmissionConfiguration and kubeconfig (its client "
                                                 "certificate for the webhook), to copy to the control plane."),
          prefix: list[str] = typer.Option([], "--prefix", help="Pool resource prefixes to intercept "
                                           "(repeat; default: GPULEDGER_POOL_RESOURCE_PREFIX and "
                                           "_ALIASES, the first names the pool annotation)."),
          resource: list[str] = typer.Option([], "--resource", help="A pool's own resource name "
                                             "outside the prefixes (repeat)."),
          days: int = typer.Option(365, "--days", min=1, help="Validity of the serving certificate."),
          apply: bool = typer.Option(False, "--apply", help="Apply to the cluster of the current "
                                     "kubeconfig / service account instead of printing."),
          out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="Also write tls.crt, tls.key "
                                                 "(mode 0600), ca.crt, the API server's client.crt and "
                                                 "client.key (0600), admission-kubeconfig.yaml (0600) and "
                                                 "admission-config.yaml here, for a webhook run outside "
                                                 "Kubernetes (GPULEDGER_ADMISSION_TLS_CERT/_KEY, _CLIENT_CA).")) -> None:
    """A new CA, serving certificate and API-server client certificate; prints the TLS Secret, the
    webhook configuration and the Secret with the API server's files."""
    settings = Settings()
    prefixes = tuple(prefix) or tuple(dict.fromkeys((settings.pool_resource_prefix,
                                                     *settings.pool_resource_aliases)))
    made = generate(service, namespace, days=days)
    if out_dir is not None:
        _write_files(out_dir, made)
    kubeconfig = admission_kubeconfig(service, namespace, made.client_cert_pem, made.client_key_pem)
    if out_dir is not None:
        _write_api_server_files(out_dir, kubeconfig)
    objects = [tls_secret(secret, namespace, made.cert_pem, made.key_pem, made.ca_pem),
               mutating_webhook(made.ca_pem, namespace, service, prefixes, tuple(resource)),
               client_secret(client_secret_name, namespace, kubeconfig)]
    if apply:
        from shared.kube import apply_all, client

        asyncio.run(apply_all(client(), objects))
        typer.echo(f"applied Secret {namespace}/{secret}, MutatingWebhookConfiguration "
                   f"{objects[1]['metadata']['name']} and Secret {namespace}/{client_secret_name} (copy its "
                   f"{ADMISSION_CONFIG_FILE} and {KUBECONFIG_FILE} to the control plane: docs/kubernetes.md)")
        return
    typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)


def _write_files(out_dir: Path, made) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (("tls.crt", made.cert_pem, 0o644), ("tls.key", made.key_pem, 0o600),
                             ("ca.crt", made.ca_pem, 0o644), ("client.crt", made.client_cert_pem, 0o644),
                             ("client.key", made.client_key_pem, 0o600)):
        _write(out_dir / name, data, mode)
    typer.echo(f"wrote tls.crt, tls.key, ca.crt, client.crt and client.key to {out_dir}", err=True)


def _write_api_server_files(out_dir: Path, kubeconfig: dict) -> None:
    _write(out_dir / KUBECONFIG_FILE, yaml.safe_dump(kubeconfig, sort_keys=False).encode(), 0o600)
    config = admission_configuration(str((out_dir / KUBECONFIG_FILE).resolve()))
    _write(out_dir / ADMISSION_CONFIG_FILE, yaml.safe_dump(config, sort_keys=False).encode(), 0o644)
    typer.echo(f"wrote {KUBECONFIG_FILE} and {ADMISSION_CONFIG_FILE} (kube-apiserver "
               f"--admission-control-config-file) to {out_dir}", err=True)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)
