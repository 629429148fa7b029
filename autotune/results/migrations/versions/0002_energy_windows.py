"""Energy windows: NVML power and energy of a measured kernel over ~1 s of launches.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "energy_windows",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("launches", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("mean_power_w", sa.Double(), nullable=False),
        sa.Column("idle_power_w", sa.Double(), nullable=True),
        sa.Column("energy_per_gemm_j", sa.Double(), nullable=False),
        sa.Column("energy_counter_j", sa.Double(), nullable=True),
        sa.Column("energy_per_gemm_counter_j", sa.Double(), nullable=True),
        sa.Column("sm_clock_mhz_mean", sa.Double(), nullable=True),
        sa.Column("sm_clock_mhz_min", sa.Integer(), nullable=True),
        sa.Column("temperature_c_max", sa.Integer(), nullable=True),
        sa.Column("throttle_reasons", sa.BigInteger(), nullable=True),
        sa.Column("throttled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_energy_windows"),
        sa.ForeignKeyConstraint(
            ["measurement_id"], ["measurements.id"], name="fk_energy_windows_measurement_id_measurements"
        ),
    )
    op.create_index("ix_energy_windows_measurement", "energy_windows", ["measurement_id"])


def downgrade() -> None:
    op.drop_index("ix_energy_windows_measurement", table_name="energy_windows")
    op.drop_table("energy_windows")
