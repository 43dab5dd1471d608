"""initial read models: claims, allocations, nodes, devices, pools, quotas, claim_events, position

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_INDEXES = {
    "claims": ["namespace", "status", "node"],
    "allocations": ["namespace", "node"],
    "devices": ["node", "model", "pool"],
}


def _s(length: int) -> sa.String:
    return sa.String(length=length)


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", _s(128), nullable=False),
        sa.Column("namespace", _s(63), nullable=False),
        sa.Column("status", _s(16), nullable=False),
        sa.Column("shape", _s(200), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("pool", _s(63), nullable=False),
        sa.Column("gang_id", _s(128), nullable=False),
        sa.Column("node", _s(253), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=False),
        sa.Column("vram_mib", sa.BigInteger(), nullable=False),
        sa.Column("borrowed_from", _s(63), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("allocated_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_claims"),
    )
    op.create_table(
        "allocations",
        sa.Column("claim_id", _s(128), nullable=False),
        sa.Column("uuid", _s(128), nullable=False),
        sa.Column("namespace", _s(63), nullable=False),
        sa.Column("node", _s(253), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("mig_index", sa.Integer(), nullable=False),
        sa.Column("milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("claim_id", "uuid", name="pk_allocations"),
    )
    op.create_table(
        "nodes",
        sa.Column("name", _s(253), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("cuda", _s(32), nullable=False),
        sa.Column("condition", _s(32), nullable=False),
        sa.Column("lost", sa.Boolean(), nullable=False),
        sa.Column("last_heartbeat", sa.Float(), nullable=False),
        sa.Column("cpu_total", sa.BigInteger(), nullable=False),
        sa.Column("cpu_free", sa.BigInteger(), nullable=False),
        sa.Column("memory_total_mib", sa.BigInteger(), nullable=False),
        sa.Column("memory_free_mib", sa.BigInteger(), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_nodes"),
    )
    op.create_table(
        "devices",
        sa.Column("uuid", _s(128), nullable=False),
        sa.Column("node", _s(253), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("mig_index", sa.Integer(), nullable=False),
        sa.Column("mig_profile", _s(32), nullable=False),
        sa.Column("model", _s(64), nullable=False),
        sa.Column("product", _s(128), nullable=False),
        sa.Column("memory_mib", sa.BigInteger(), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("health", _s(16), nullable=False),
        sa.Column("pool", _s(63), nullable=False),
        sa.Column("milli_free", sa.Integer(), nullable=False),
        sa.Column("holders", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("uuid", name="pk_devices"),
    )
    op.create_table(
        "pools",
        sa.Column("name", _s(63), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_pools"),
    )
    op.create_table(
        "quotas",
        sa.Column("namespace", _s(63), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("tflops", sa.Float(), nullable=False),
        sa.Column("vram_mib", sa.BigInteger(), nullable=False),
        sa.Column("limit_tflops", sa.Float(), nullable=False),
        sa.Column("limit_vram_mib", sa.BigInteger(), nullable=False),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", name="pk_quotas"),
    )
    op.create_table(
        "claim_events",
        sa.Column("claim_id", _s(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("type", _s(40), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("claim_id", "seq", "part", name="pk_claim_events"),
    )
    op.create_table(
        "projector_position",
        sa.Column("name", _s(64), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_projector_position"),
    )
    for table, columns in _INDEXES.items():
        for column in columns:
            op.create_index(f"ix_{table}_{column}", table, [column])
    op.create_index("ix_claim_events_seq", "claim_events", ["seq"])


def downgrade() -> None:
    for table in ("projector_position", "claim_events", "quotas", "pools", "devices", "nodes",
                  "allocations", "claims"):
        op.drop_table(table)
