"""The history as kafkaproof created it before migrations: one table, scenario_runs.

Revision ID: 0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scenario_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scenario", sa.String(100), nullable=False, index=True),
        sa.Column("run_id", sa.String(200), nullable=False, unique=True),
        sa.Column("batch_id", sa.String(200)),
        sa.Column("kafka_version", sa.String(20)),
        sa.Column("client_version", sa.String(40)),
        sa.Column("scenario_hash", sa.String(32)),
        sa.Column("guarantee", sa.String(20)),
        sa.Column("verdict", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20)),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("report", sa.String(500)),
    )


def downgrade() -> None:
    op.drop_table("scenario_runs")
