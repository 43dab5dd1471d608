"""The requests running on each model slot, folded from the log (`SlotRequestStarted`,
`SlotRequestFinished` on `gpu.evt.slot.<slot>`): every claim-service replica counts the same
requests, and a restarted one still sees them. Each slot's subject sequence is the fence its next
request is appended against, so two replicas never give a slot more requests than it takes."""

from __future__ import annotations

from collections.abc import Callable

from schemas import events as ev


class SlotBook:
    def __init__(self) -> None:
        self.running: dict[str, dict[str, float]] = {}  # slot -> request id -> started at
        self.last_activity: dict[str, float] = {}  # slot -> time of its last request start or finish
        self.fence: dict[str, int] = {}  # slot -> sequence of the last event on its subject

    def on_event(self, seq: int, subject: str, event: ev.Event) -> None:
        """A follower listener: folds the slot events, catch-up included."""
        if isinstance(event, ev.SlotRequestStarted):
            self.running.setdefault(event.slot_id, {})[event.request_id] = event.at
        elif isinstance(event, ev.SlotRequestFinished):
            requests = self.running.get(event.slot_id)
            if requests is not None:
                requests.pop(event.request_id, None)
                if not requests:
                    del self.running[event.slot_id]
        else:
            return
        self.last_activity[event.slot_id] = max(self.last_activity.get(event.slot_id, 0.0), event.at)
        self.fence[event.slot_id] = seq

    def active(self, slot_id: str) -> int:
        return len(self.running.get(slot_id, ()))

    def oldest(self, slot_id: str) -> str | None:
        requests = self.running.get(slot_id)
        return min(requests, key=lambda r: (requests[r], r)) if requests else None

    def overdue(self, now: float, timeout_s: float,
                started_at: Callable[[str, str], float] | None = None) -> list[tuple[str, str]]:
        """(slot, request) of every request running longer than `timeout_s`, oldest first. With
        `started_at` (the claim service's time of hearing each start: services/claim/heard.py),
        judged by it, `now` on the same clock; without, by the start's time in the log."""
        late = []
        for slot, requests in self.running.items():
            for request, logged in requests.items():
                started = started_at(slot, request) if started_at is not None else logged
                if now - started >= timeout_s:
                    late.append((started, slot, request))
        return [(slot, request) for _, slot, request in sorted(late)]

    def forget(self, slot_id: str) -> None:
        """The slot's claim ended: its requests went with it (its fence stays, should it return)."""
        self.running.pop(slot_id, None)
        self.last_activity.pop(slot_id, None)
