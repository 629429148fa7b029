"""Initial schema: environments, problems, kernels, measurements, failures.

Revision ID: 0001
Revises:
Create Date: 2025-11-29
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
        "environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_key", sa.String(64), nullable=False),
        sa.Column("gpu_name", sa.String(128), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("cuda_runtime", sa.String(32), nullable=False),
        sa.Column("nvrtc", sa.String(32), nullable=False),
        sa.Column("cupy", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_environments"),
        sa.UniqueConstraint(
            "gpu_key", "gpu_name", "arch", "driver", "cuda_runtime", "nvrtc", "cupy",
            name="uq_environments_identity",
        ),
    )
    op.create_table(
        "problems",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("layout", sa.String(16), nullable=False),
        sa.Column("alpha", sa.Double(), nullable=False),
        sa.Column("beta", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_problems"),
        sa.UniqueConstraint("m", "n", "k", "dtype", "layout", "alpha", "beta", name="uq_problems_identity"),
    )
    op.create_table(
        "kernels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("template_hash", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_kernels"),
        sa.UniqueConstraint("family", "name", "template_hash", name="uq_kernels_identity"),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=False),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=True),
        sa.Column("implementation", sa.String(16), nullable=False),
        sa.Column("study", sa.String(255), nullable=True),
        sa.Column("median_ms", sa.Double(), nullable=False),
        sa.Column("min_ms", sa.Double(), nullable=False),
        sa.Column("max_ms", sa.Double(), nullable=False),
        sa.Column("q25_ms", sa.Double(), nullable=False),
        sa.Column("q75_ms", sa.Double(), nullable=False),
        sa.Column("samples_json", sa.Text(), nullable=False),
        sa.Column("tflops", sa.Double(), nullable=False),
        sa.Column("max_error", sa.Double(), nullable=False),
        sa.Column("sm_clock_mhz", sa.Integer(), nullable=True),
        sa.Column("throttle_reasons", sa.BigInteger(), nullable=True),
        sa.Column("temperature_c", sa.Integer(), nullable=True),
        sa.Column("registers", sa.Integer(), nullable=True),
        sa.Column("smem_static", sa.Integer(), nullable=True),
        sa.Column("smem_dynamic", sa.Integer(), nullable=True),
        sa.Column("spill_stores", sa.Integer(), nullable=True),
        sa.Column("spill_loads", sa.Integer(), nullable=True),
        sa.Column("stack_frame", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_measurements"),
        sa.ForeignKeyConstraint(
            ["environment_id"], ["environments.id"], name="fk_measurements_environment_id_environments"
        ),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name="fk_measurements_problem_id_problems"),
        sa.ForeignKeyConstraint(["kernel_id"], ["kernels.id"], name="fk_measurements_kernel_id_kernels"),
        sa.CheckConstraint(
            "(implementation = 'candidate' AND kernel_id IS NOT NULL)"
            " OR (implementation = 'cublas' AND kernel_id IS NULL)",
            name="ck_measurements_implementation",
        ),
    )
    op.create_index("ix_measurements_environment_problem", "measurements", ["environment_id", "problem_id"])
    op.create_table(
        "failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment_id", sa.Integer(), nullable=True),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=True),
        sa.Column("study", sa.String(255), nullable=True),
        sa.Column("failure_class", sa.String(32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_failures"),
        sa.ForeignKeyConstraint(
            ["environment_id"], ["environments.id"], name="fk_failures_environment_id_environments"
        ),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name="fk_failures_problem_id_problems"),
        sa.ForeignKeyConstraint(["kernel_id"], ["kernels.id"], name="fk_failures_kernel_id_kernels"),
    )
    op.create_index("ix_failures_environment_problem", "failures", ["environment_id", "problem_id"])


def downgrade() -> None:
    op.drop_index("ix_failures_environment_problem", table_name="failures")
    op.drop_table("failures")
    op.drop_index("ix_measurements_environment_problem", table_name="measurements")
    op.drop_table("measurements")
    op.drop_table("kernels")
    op.drop_table("problems")
    op.drop_table("environments")
