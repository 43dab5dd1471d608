"""The autoscaler as tables: an endpoint's view at time `now` -> the scaling step and its reason."""

from __future__ import annotations

import pytest

from schemas.types import EndpointSpec
from services.claim.autoscaler import EndpointView, Load, Worker, decide_scaling

NOW = 1000.0


def spec(**fields) -> EndpointSpec:
    base = {"name": "ep", "namespace": "ns", "workers_min": 0, "workers_max": 5,
            "scaler_type": "QUEUE_DELAY", "scaler_value": 4, "idle_timeout_s": 30.0}
    return EndpointSpec(**(base | fields))


def busy(n: int, status: str = "allocated") -> Worker:
    return Worker(f"ep-w{n}", status, last_active=NOW - 1)  # active a second ago


def idle(n: int, for_s: float, status: str = "allocated") -> Worker:
    return Worker(f"ep-w{n}", status, last_active=NOW - for_s)


CASES = [
    # (case, spec fields, load, workers, expected (add, released ids), words in the reason)
    ("nothing to do at rest", {}, Load(), [], (0, ()), "queue empty"),
    ("workers_min is kept warm", {"workers_min": 2}, Load(), [], (2, ()), "workers_min is 2"),
    ("a lost worker is replaced to keep workers_min", {"workers_min": 2}, Load(),
     [busy(1), Worker("ep-w2", "evicted", NOW - 1)], (1, ()), "workers_min"),
    ("cold start", {}, Load(queued=1), [], (1, ()), "cold start"),
    ("queue delay over the threshold adds one", {}, Load(queued=9, oldest_wait_s=4.5),
     [busy(1), busy(2)], (1, ()), "queue delay 4.5s > 4s"),
    ("queue delay at the threshold is enough", {}, Load(queued=9, oldest_wait_s=4.0), [busy(1)],
     (0, ()), "within"),
    ("no second step while a worker is starting", {}, Load(queued=9, oldest_wait_s=60),
     [busy(1), busy(2, "pending")], (0, ()), "within"),
    ("queue delay is capped at workers_max", {"workers_max": 2}, Load(queued=9, oldest_wait_s=60),
     [busy(1), busy(2)], (0, ()), "capped at workers_max 2"),
    ("busy workers stay while requests queue", {}, Load(queued=3, oldest_wait_s=1.0),
     [idle(1, 300), idle(2, 300)], (0, ()), "within"),
    ("an idle worker goes after the idle timeout", {}, Load(), [busy(1), idle(2, 31)],
     (0, ("ep-w2",)), "idle"),
    ("an idle worker stays before the idle timeout", {}, Load(), [idle(1, 29)], (0, ()), "queue empty"),
    ("idle workers above workers_min go, the longest idle first", {"workers_min": 1}, Load(),
     [idle(1, 40), idle(2, 100), idle(3, 50)], (0, ("ep-w2", "ep-w3")), "idle"),
    ("a starting worker goes before a running one", {}, Load(),
     [idle(1, 100), idle(2, 35, "pending")], (0, ("ep-w2", "ep-w1")), "idle"),
    ("request count targets ceil(rpm / value)", {"scaler_type": "REQUEST_COUNT", "scaler_value": 50},
     Load(requests_per_min=120), [busy(1)], (2, ()), "120 requests/min / 50 per worker = 3"),
    ("request count exactly on a multiple", {"scaler_type": "REQUEST_COUNT", "scaler_value": 50},
     Load(requests_per_min=100), [busy(1), busy(2)], (0, ()), "= 2"),
    ("request count with queued requests but no rate starts one",
     {"scaler_type": "REQUEST_COUNT", "scaler_value": 50}, Load(queued=2), [], (1, ()), "queued"),
    ("request count never above workers_max", {"scaler_type": "REQUEST_COUNT", "scaler_value": 10,
                                               "workers_max": 3},
     Load(requests_per_min=1000), [], (3, ()), "capped at workers_max 3 (load asks for 100)"),
    ("request count scales down only idle workers", {"scaler_type": "REQUEST_COUNT", "scaler_value": 50},
     Load(requests_per_min=40), [busy(1), busy(2), idle(3, 60)], (0, ("ep-w3",)), "idle"),
    ("request count keeps busy workers above the target", {"scaler_type": "REQUEST_COUNT",
                                                            "scaler_value": 50},
     Load(requests_per_min=10), [busy(1), busy(2)], (0, ()), "= 1"),
    ("request count never below workers_min", {"scaler_type": "REQUEST_COUNT", "workers_min": 2},
     Load(), [idle(1, 500), idle(2, 500)], (0, ()), "workers_min is 2"),
    ("ended workers do not count", {}, Load(queued=1),
     [Worker("ep-w1", "released", 0.0), Worker("ep-w2", "lost", 0.0)], (1, ()), "cold start"),
    ("workers above workers_max go even when busy", {"workers_max": 1}, Load(queued=5, oldest_wait_s=1),
     [busy(1), busy(2)], (0, ("ep-w1",)), "above workers_max 1"),
]


@pytest.mark.parametrize("case, fields, load, workers, expected, words", CASES, ids=[c[0] for c in CASES])
def test_the_autoscaler_decides_by_the_table(case, fields, load, workers, expected, words):
    step = decide_scaling(EndpointView(spec(**fields), load, tuple(workers)), NOW)
    assert (step.add, step.release) == expected
    live = sum(1 for w in workers if w.live)
    assert step.before == live and step.after == live + step.add - len(step.release)
    assert words in step.reason


@pytest.mark.parametrize("fields", [{"workers_min": 1, "workers_max": 2}, {"workers_min": 0, "workers_max": 1},
                                    {"scaler_type": "REQUEST_COUNT", "scaler_value": 1, "workers_max": 4}])
@pytest.mark.parametrize("load", [Load(), Load(queued=50, oldest_wait_s=100, requests_per_min=500)])
def test_the_result_stays_within_workers_min_and_max(fields, load):
    s = spec(**fields)
    for live in range(0, 6):
        workers = tuple(idle(n, 1000) for n in range(1, live + 1))
        step = decide_scaling(EndpointView(s, load, workers), NOW)
        if live < s.workers_min:
            assert step.after == s.workers_min
        elif live > s.workers_max:
            assert step.after == s.workers_max
        else:
            assert s.workers_min <= step.after <= s.workers_max
