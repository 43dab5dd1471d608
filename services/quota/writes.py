"""The quota service's commands that append: set, delete and apply quotas, the default quota.

Each validates against the service's fold of the log (`self.view`), appends, and waits until its
event is folded back, so the reply shows the state it made.
"""

from __future__ import annotations

from schemas import commands as cmd
from schemas import events as ev
from schemas import subjects
from shared.commands import DomainError

from services.quota.manifest import parents_first
from services.quota.quantities import QuantityError
from services.quota.status import QuotaStatus, namespace_status
from services.quota.validation import spec_from_command, spec_from_default


class QuotaWrites:
    """Mixed into QuotaService: needs `log`, `follower`, `view`, `clock`, `get` and `get_default`."""

    async def _read_to_the_end(self) -> None:
        """A write is checked against the whole log: the fold first reads what is stored (it reads
        in bursts, and after a start it reads the whole log). Checked against the part read so far,
        `quota delete` of a quota it had not read yet answered `not-found`, and `quota apply` of a
        manifest equal to an older spec of a namespace called it `unchanged` and stored nothing
        (session 31's outsider)."""
        await self.follower.wait_for_seq(await self.log.last_seq(), timeout=None)

    async def set_quota(self, c: cmd.SetQuota) -> dict:
        await self._read_to_the_end()
        try:
            spec = spec_from_command(c, self.view.state.quotas)
        except QuantityError as err:
            raise DomainError("invalid", err.message, err.field)
        appended = await self.log.append(subjects.quota(c.namespace),
                                         ev.QuotaSet(namespace=c.namespace, spec=spec, at=self.clock()))
        await self.follower.wait_for_seq(appended.seq)
        status = namespace_status(self.view, c.namespace)
        return {"namespace": c.namespace, "seq": appended.seq, "status": status,
                "warnings": _warnings(status)}

    async def delete_quota(self, c: cmd.DeleteQuota) -> dict:
        await self._read_to_the_end()
        self._quota_status(c.namespace)
        children = [ns for ns, q in self.view.state.quotas.items() if q.parent == c.namespace]
        appended = await self.log.append(subjects.quota(c.namespace),
                                         ev.QuotaDeleted(namespace=c.namespace, at=self.clock()))
        await self.follower.wait_for_seq(appended.seq)
        warnings = ([f"{', '.join(sorted(children))} still name {c.namespace} as parent: their cohort "
                     "is now bounded by the sum of their own quotas"] if children else [])
        return {"namespace": c.namespace, "deleted": True, "seq": appended.seq, "warnings": warnings}

    async def apply(self, c: cmd.ApplyQuotas) -> dict:
        """Validate every quota against the log and the others in the set, then store the changed
        ones, parents first. Fields in errors are `quotas[<index>].<field>`."""
        await self._read_to_the_end()
        planned = self._plan(c.quotas)
        results, last = [], 0
        for index, namespace, spec in planned:
            stored = self.view.state.quotas.get(namespace)
            action = "unchanged" if stored == spec else ("configured" if stored is not None else "created")
            results.append({"index": index, "namespace": namespace, "action": action})
            if action != "unchanged" and not c.dry_run:
                appended = await self.log.append(subjects.quota(namespace),
                                                 ev.QuotaSet(namespace=namespace, spec=spec, at=self.clock()))
                last = results[-1]["seq"] = appended.seq
        if last:
            await self.follower.wait_for_seq(last)
        warnings = [] if c.dry_run else [f"{r['namespace']}: {w}" for r in results if r["action"] != "unchanged"
                                          for w in _warnings(namespace_status(self.view, r["namespace"]))]
        return {"results": results, "dry_run": c.dry_run, "warnings": warnings}

    def _plan(self, quotas: list[cmd.SetQuota]) -> list[tuple[int, str, object]]:
        known, planned, seen = dict(self.view.state.quotas), [], {}
        for index in parents_first(quotas):
            one = quotas[index]
            if one.namespace in seen:
                raise DomainError("invalid", f"{one.namespace} is given twice (also as quota {seen[one.namespace]})",
                                  f"quotas[{index}].namespace")
            seen[one.namespace] = index
            try:
                spec = known[one.namespace] = spec_from_command(one, known)
            except QuantityError as err:
                raise DomainError("invalid", f"{one.namespace}: {err.message}", f"quotas[{index}].{err.field}")
            planned.append((index, one.namespace, spec))
        return planned

    async def set_default(self, c: cmd.SetDefaultQuota) -> dict:
        await self._read_to_the_end()
        try:
            spec = spec_from_default(c)
        except QuantityError as err:
            raise DomainError("invalid", err.message, err.field)
        appended = await self.log.append(subjects.DEFAULT_QUOTA, ev.QuotaDefaultSet(spec=spec, at=self.clock()))
        await self.follower.wait_for_seq(appended.seq)
        default = self.get_default()
        over = [s for s in map(self.get, default["applies_to"]) if _warnings(s)]
        return default | {"seq": appended.seq,
                          "warnings": [f"{s.namespace}: {w}" for s in over for w in _warnings(s)]}

    async def delete_default(self) -> dict:
        await self._read_to_the_end()
        self.get_default()
        appended = await self.log.append(subjects.DEFAULT_QUOTA, ev.QuotaDefaultDeleted(at=self.clock()))
        await self.follower.wait_for_seq(appended.seq)
        return {"deleted": True, "seq": appended.seq}


def _warnings(status: QuotaStatus | None) -> list[str]:
    if status is None:
        return []
    return [c.message for c in status.conditions if c.type == "Exceeded" and c.reason == "OverQuota"]
