"""Each run's label in its batch (current / candidate / rolling in an upgrade check, the client in a
client matrix), and an index for "the latest runs of a scenario", the gate's baseline query.

Revision ID: 0002
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scenario_runs") as batch:
        batch.add_column(sa.Column("label", sa.String(40)))
    op.create_index("ix_scenario_runs_scenario_finished", "scenario_runs", ["scenario", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_scenario_runs_scenario_finished", table_name="scenario_runs")
    with op.batch_alter_table("scenario_runs") as batch:
        batch.drop_column("label")
