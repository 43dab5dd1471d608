"""The read-model tables (SQLAlchemy 2, typed). Alembic owns their creation: see deploy/migrations.

Everything a query needs is a column; nested values the queries only display (grants, reasons,
labels, specs) are JSON. Times are unix seconds, as in the events.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ClaimRow(Base):
    __tablename__ = "claims"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    shape: Mapped[str] = mapped_column(String(200))  # e.g. "2x gpu", "500m gpu", "mig 1g.10gb"
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_milli: Mapped[int] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer)
    pool: Mapped[str] = mapped_column(String(63))
    gang_id: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253), index=True)
    devices: Mapped[list[Any]] = mapped_column()  # the grants, kept after the claim ends
    env: Mapped[dict[str, Any]] = mapped_column()
    reasons: Mapped[list[Any]] = mapped_column()
    spec: Mapped[dict[str, Any]] = mapped_column()
    tflops: Mapped[float] = mapped_column(Float)
    vram_mib: Mapped[int] = mapped_column(BigInteger)
    borrowed_from: Mapped[str] = mapped_column(String(63))
    submitted_at: Mapped[float] = mapped_column(Float)
    allocated_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    end_reason: Mapped[str] = mapped_column(Text)
    last_seq: Mapped[int] = mapped_column(BigInteger)


class AllocationRow(Base):
    """One grant a claim holds now (rows go when the claim ends; `claims.devices` keeps them)."""

    __tablename__ = "allocations"

    claim_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(128), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63), index=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    index: Mapped[int] = mapped_column(Integer)
    mig_index: Mapped[int] = mapped_column(Integer)
    milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(BigInteger)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    labels: Mapped[dict[str, Any]] = mapped_column()
    cuda: Mapped[str] = mapped_column(String(32))
    condition: Mapped[str] = mapped_column(String(32))
    lost: Mapped[bool] = mapped_column(Boolean)
    last_heartbeat: Mapped[float] = mapped_column(Float)
    cpu_total: Mapped[int] = mapped_column(BigInteger)
    cpu_free: Mapped[int] = mapped_column(BigInteger)
    memory_total_mib: Mapped[int] = mapped_column(BigInteger)
    memory_free_mib: Mapped[int] = mapped_column(BigInteger)
    devices: Mapped[int] = mapped_column(Integer)
    claims: Mapped[int] = mapped_column(Integer)


class DeviceRow(Base):
    __tablename__ = "devices"

    uuid: Mapped[str] = mapped_column(String(128), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    index: Mapped[int] = mapped_column(Integer)
    mig_index: Mapped[int] = mapped_column(Integer)
    mig_profile: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(64), index=True)
    product: Mapped[str] = mapped_column(String(128))
    memory_mib: Mapped[int] = mapped_column(BigInteger)
    island: Mapped[int] = mapped_column(Integer)
    health: Mapped[str] = mapped_column(String(16))
    pool: Mapped[str] = mapped_column(String(63), index=True)
    milli_free: Mapped[int] = mapped_column(Integer)
    holders: Mapped[dict[str, Any]] = mapped_column()  # claim id -> milli


class PoolRow(Base):
    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column()
    devices: Mapped[int] = mapped_column(Integer)


class QuotaRow(Base):
    """A namespace's quota (spec is null when it has none) and its use, the fold of allocations."""

    __tablename__ = "quotas"

    namespace: Mapped[str] = mapped_column(String(63), primary_key=True)
    spec: Mapped[dict[str, Any] | None] = mapped_column()
    tflops: Mapped[float] = mapped_column(Float)
    vram_mib: Mapped[int] = mapped_column(BigInteger)
    limit_tflops: Mapped[float] = mapped_column(Float)
    limit_vram_mib: Mapped[int] = mapped_column(BigInteger)
    workers: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)


class ClaimEventRow(Base):
    """The per-claim index of the log: every event naming a claim, decisions in batches too."""

    __tablename__ = "claim_events"

    claim_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    part: Mapped[int] = mapped_column(Integer, primary_key=True)  # position inside a DecisionBatch
    type: Mapped[str] = mapped_column(String(40))
    at: Mapped[float] = mapped_column(Float)
    summary: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_claim_events_seq", "seq"),)


class PositionRow(Base):
    """How far a projection has read; written in the same transaction as the rows it explains."""

    __tablename__ = "projector_position"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)


TABLES = [ClaimRow, AllocationRow, NodeRow, DeviceRow, PoolRow, QuotaRow, ClaimEventRow, PositionRow]
