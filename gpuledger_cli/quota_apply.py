"""`gpuledger quota apply -f FILE`: the seed's GPUResourceQuota manifests (and GPUResourceCohort),
multi-document YAML or JSON, applied together: every error names the file, the document and the
manifest field; nothing is stored unless every document is valid."""

from __future__ import annotations

import asyncio
import re
from typing import NamedTuple

import msgspec
import typer

from gpuledger_cli.client import connect_or_die, die
from gpuledger_cli.documents import load_documents
from schemas import subjects
from schemas.commands import ApplyQuotas, SetQuota
from services.quota.manifest import ManifestError, field_path, quota_from_document
from services.quota.quantities import QuantityError
from services.quota.validation import spec_from_command


class Document(NamedTuple):
    where: str  # "quota.yaml, document 2"
    kind: str
    quota: SetQuota


def read_manifests(paths: list[str], namespace: str = "") -> list[Document]:
    """Every document of every file, mapped and checked on its own (quantities, known fields)."""
    documents = []
    for path in paths:
        for number, doc in enumerate(_load(path), start=1):
            if doc is None:
                continue  # an empty document between two `---`
            where = f"{path}, document {number}"
            try:
                quota, kind = quota_from_document(doc, namespace)
                spec_from_command(quota, {})
            except ManifestError as err:
                die(f"{where}: {err.field}: {err.message}")
            except QuantityError as err:
                die(f"{where}: {field_path(err.field, kind)}: {err.message}")
            first = next((d.where for d in documents if d.quota.namespace == quota.namespace), None)
            if first is not None:
                name = "metadata.name" if kind == "GPUResourceCohort" else "metadata.namespace"
                die(f"{where}: {name}: {quota.namespace} is given twice (first in {first})")
            documents.append(Document(where, kind, quota))
    if not documents:
        die(f"no manifests in {', '.join(paths)}")
    return documents


def _load(path: str) -> list:
    return load_documents(path)  # one line naming the file for non-UTF-8, nesting, repeated keys


async def send(url: str, documents: list[Document], dry_run: bool) -> dict:
    """The service's reply data; an error is printed with the document and manifest field."""
    nc = await connect_or_die(url)
    try:
        body = msgspec.json.encode(ApplyQuotas(quotas=[d.quota for d in documents], dry_run=dry_run))
        try:
            msg = await nc.request(subjects.command("quota.apply"), body, timeout=15.0)
        except Exception as err:
            die(f"no answer on {subjects.command('quota.apply')} ({type(err).__name__}). Is the quota "
                "service running?")
        reply = msgspec.json.decode(msg.data)
    finally:
        await nc.close()
    if not reply.get("ok"):
        die(_explain(reply.get("error") or {}, documents))
    return reply["data"]


def _explain(error: dict, documents: list[Document]) -> str:
    match = re.match(r"^quotas\[(\d+)\]\.(\w+)$", error.get("field", ""))
    if match is None or int(match.group(1)) >= len(documents):
        field = f" (field {error['field']})" if error.get("field") else ""
        return f"{error.get('code', 'error')}: {error.get('message', error)}{field}"
    document = documents[int(match.group(1))]
    return (f"{document.where}: {field_path(match.group(2), document.kind)}: "
            f"{error.get('message', '')}")


def apply_files(url: str, paths: list[str], namespace: str, dry_run: bool) -> dict:
    return asyncio.run(send(url, read_manifests(paths, namespace), dry_run))


def print_results(data: dict) -> None:
    suffix = " (dry run: nothing stored)" if data.get("dry_run") else ""
    for result in data["results"]:
        typer.echo(f"quota {result['namespace']} {result['action']}{suffix}")
    for warning in data.get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)
