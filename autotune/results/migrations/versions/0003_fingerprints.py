"""Fingerprints: one unique key per measurement, failure and energy window.

Rows stored before this revision get the fingerprint of what they hold
(autotune.results.fingerprint). Rows that turn out to be the same result (a file
imported twice at once by an older autotune) are merged into the oldest one; the
energy windows of a merged measurement move to the one kept.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from autotune.results import fingerprint

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = ("measurements", "failures", "energy_windows")
_WHERE = (
    " FROM {table} AS r"
    " {join} environments AS e ON e.id = r.environment_id"
    " JOIN problems AS p ON p.id = r.problem_id"
    " LEFT JOIN kernels AS k ON k.id = r.kernel_id"
)
_SHARED_COLUMNS = (
    "e.id AS environment_id, e.gpu_key, e.gpu_name, e.arch, e.driver, e.cuda_runtime, e.nvrtc, e.cupy,"
    " p.m, p.n, p.k, p.dtype, p.layout, p.alpha, p.beta, k.family, k.name, k.template_hash,"
    " r.kernel_id, r.study, r.created_at"
)


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("fingerprint", sa.String(64), nullable=True))
    connection = op.get_bind()
    measurements = _fill_measurements(connection)
    _fill_energy_windows(connection, measurements)
    _fill_failures(connection)
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("fingerprint", existing_type=sa.String(64), nullable=False)
            batch.create_unique_constraint(f"uq_{table}_fingerprint", ["fingerprint"])


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"uq_{table}_fingerprint", type_="unique")
            batch.drop_column("fingerprint")


def _fill_measurements(connection) -> dict[int, str]:
    """Fingerprint every measurement, merge duplicates; returns id -> fingerprint of those kept."""
    query = sa.text(f"SELECT r.id, {_SHARED_COLUMNS}, r.median_ms, r.samples_json"
                    + _WHERE.format(table="measurements", join="JOIN") + " ORDER BY r.id")
    query = query.columns(created_at=sa.DateTime(timezone=True))
    prints = {}
    for row in connection.execute(query).mappings():
        prints[row["id"]] = fingerprint.measurement(
            row, row, _kernel(row), row["study"], row["created_at"], row["median_ms"], json.loads(row["samples_json"]))
    move_windows = sa.text("UPDATE energy_windows SET measurement_id = :keep WHERE measurement_id = :gone")
    _merge(connection, "measurements", prints,
           lambda keep, gone: connection.execute(move_windows, {"keep": keep, "gone": gone}))
    return prints


def _fill_energy_windows(connection, measurements: dict[int, str]) -> None:
    query = sa.text("SELECT id, measurement_id, created_at, seconds, launches, mean_power_w, energy_per_gemm_j"
                    " FROM energy_windows ORDER BY id").columns(created_at=sa.DateTime(timezone=True))
    prints = {
        row["id"]: fingerprint.energy_window(measurements[row["measurement_id"]], row["created_at"], row["seconds"],
                                             row["launches"], row["mean_power_w"], row["energy_per_gemm_j"])
        for row in connection.execute(query).mappings()
    }
    _merge(connection, "energy_windows", prints)


def _fill_failures(connection) -> None:
    query = sa.text(f"SELECT r.id, {_SHARED_COLUMNS}, r.failure_class, r.message"
                    + _WHERE.format(table="failures", join="LEFT JOIN") + " ORDER BY r.id")
    query = query.columns(created_at=sa.DateTime(timezone=True))
    prints = {
        row["id"]: fingerprint.failure(None if row["environment_id"] is None else row, row, _kernel(row), row["study"],
                                       row["failure_class"], row["message"], row["created_at"])
        for row in connection.execute(query).mappings()
    }
    _merge(connection, "failures", prints)


def _merge(connection, table: str, prints: dict[int, str], move_children=None) -> None:
    """Store the fingerprints; of rows sharing one, keep the oldest (lowest id) and delete the others
    (``move_children(kept id, deleted id)`` first)."""
    first_with: dict[str, int] = {}
    kept = []
    for row_id, digest in sorted(prints.items()):
        if digest not in first_with:
            first_with[digest] = row_id
            kept.append({"id": row_id, "fingerprint": digest})
            continue
        if move_children is not None:
            move_children(first_with[digest], row_id)
        connection.execute(sa.text(f"DELETE FROM {table} WHERE id = :id"), {"id": row_id})
    if kept:
        connection.execute(sa.text(f"UPDATE {table} SET fingerprint = :fingerprint WHERE id = :id"), kept)


def _kernel(row) -> tuple[str, str, str | None] | None:
    return None if row["kernel_id"] is None else (row["family"], row["name"], row["template_hash"])
