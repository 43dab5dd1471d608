"""Kept for the tests that import it here: the digest lives in the core now (the bench uses it)."""

from ledger.digest import digest

__all__ = ["digest"]
