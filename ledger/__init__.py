"""The fold every service shares: the state the log folds into, `evolve`, the holdings ledger
(allocate/free), pools, quota arithmetic, typical shapes, snapshots, digests and the follower
that keeps a state current. Pure but for the follower, which awaits an event log handed to it.
Services import this package, never each other's folders (tests/unit/test_dependencies.py)."""
