"""`gpuledger webhook certs`: the pod webhook's TLS Secret and its MutatingWebhookConfiguration
with the caBundle filled, as YAML for `kubectl apply -f -` (or applied directly with --apply)."""

from __future__ import annotations

import asyncio

import typer
import yaml

from services.pool_controller.webhook_config import mutating_webhook, tls_secret
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
          prefix: list[str] = typer.Option([], "--prefix", help="Pool resource prefixes to intercept "
                                           "(repeat; default: GPULEDGER_POOL_RESOURCE_PREFIX and "
                                           "_ALIASES, the first names the pool annotation)."),
          resource: list[str] = typer.Option([], "--resource", help="A pool's own resource name "
                                             "outside the prefixes (repeat)."),
          days: int = typer.Option(365, "--days", help="Validity of the serving certificate."),
          apply: bool = typer.Option(False, "--apply", help="Apply to the cluster of the current "
                                     "kubeconfig / service account instead of printing.")) -> None:
    """A new CA and serving certificate; prints the Secret and the webhook configuration."""
    settings = Settings()
    prefixes = tuple(prefix) or tuple(dict.fromkeys((settings.pool_resource_prefix,
                                                     *settings.pool_resource_aliases)))
    made = generate(service, namespace, days=days)
    objects = [tls_secret(secret, namespace, made.cert_pem, made.key_pem, made.ca_pem),
               mutating_webhook(made.ca_pem, namespace, service, prefixes, tuple(resource))]
    if apply:
        from shared.kube import apply_all, client

        asyncio.run(apply_all(client(), objects))
        typer.echo(f"applied Secret {namespace}/{secret} and MutatingWebhookConfiguration "
                   f"{objects[1]['metadata']['name']}")
        return
    typer.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
