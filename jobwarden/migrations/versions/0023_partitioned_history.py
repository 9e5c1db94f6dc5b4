"""operation_events partitioned by month of its operation's creation; archived_histories
(issue 23)

A history kept forever must still be verifiable, and its old part removable without
deleting a row. ``operation_events`` becomes a table partitioned by RANGE on a new
column, ``operation_created_at`` (the operation's ``created_at``, the same on every
event of an operation), one partition a month in schema ``event_partitions``
(``operation_events_YYYYMM``) and a DEFAULT partition so that no write is ever refused.
An operation's whole history lives in one partition, so a month whose operations all
ended can be archived to the result store (``archived_histories`` says where, with the
segment's sha256 and the chain head it reaches) and its partition detached and dropped
whole.

Keys: the primary key is ``(operation_id, seq, operation_created_at)``: as strong as the
old unique ``(operation_id, seq)`` (an operation has one created_at) and the one index a
poll's event insert writes. ``event_id`` stays (the metrics' recent window reads it)
with a BRIN index, which an append writes to only when a summarised page range must
widen: the btree on it cost every poll a second index write.

Append-only: the row trigger on the parent is cloned to every partition (Postgres 13+);
a statement trigger is not, so ``jobwarden_add_history_partition`` gives each partition
its own TRUNCATE refusal. Existing rows are copied with their operation's created_at.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

SCHEMA = "event_partitions"
COLUMNS = (
    "event_id, operation_id, seq, actor, at, from_state, to_state, kind, cause, "
    "delay_source, http_status, provider_request_id, excerpt, prev_hash, hash, row_digest"
)
TZ = sa.DateTime(timezone=True)

# Creates (if missing) the partition of the month holding ``month`` (UTC), with the
# TRUNCATE refusal a partition does not inherit; returns its name. The maintenance
# step (jobwarden archive) calls it too, so the month layout is defined once, here.
ADD_PARTITION = f"""
CREATE FUNCTION jobwarden_add_history_partition(month timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    low timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    high timestamptz := low + interval '1 month';
    name text := 'operation_events_' || to_char(low AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass(format('{SCHEMA}.%I', name)) IS NULL THEN
        EXECUTE format(
            'CREATE TABLE {SCHEMA}.%I PARTITION OF public.operation_events '
            'FOR VALUES FROM (%L) TO (%L)', name, low, high);
        EXECUTE format(
            'CREATE TRIGGER operation_events_no_truncate BEFORE TRUNCATE ON {SCHEMA}.%I '
            'FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_history_change()', name);
    END IF;
    RETURN name;
END;
$$
"""


TALLY_PROVIDER_ANSWERS = (
    "CREATE TRIGGER tally_provider_answers AFTER INSERT ON operation_events "
    "REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_tally_provider_answers()"
)


def upgrade() -> None:
    # No write may slip between the copy and the swap.
    op.execute("LOCK TABLE operation_events IN ACCESS EXCLUSIVE MODE")
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    op.execute("ALTER TABLE operation_events RENAME TO operation_events_unpartitioned")
    for old in ("pk_operation_events", "uq_operation_events_seq"):
        op.execute(f"ALTER INDEX {old} RENAME TO {old}_unpartitioned")
    op.execute(
        "ALTER TABLE operation_events_unpartitioned RENAME CONSTRAINT "
        "fk_operation_events_operation_id TO fk_operation_events_operation_id_unpartitioned"
    )
    op.execute("ALTER SEQUENCE operation_events_event_id_seq OWNED BY NONE")
    op.execute(
        """
        CREATE TABLE operation_events (
            event_id bigint NOT NULL DEFAULT nextval('operation_events_event_id_seq'),
            operation_id uuid NOT NULL,
            seq integer NOT NULL,
            actor varchar(200) NOT NULL,
            at timestamptz NOT NULL,
            from_state varchar(40),
            to_state varchar(40),
            kind varchar(40) NOT NULL,
            cause text,
            delay_source varchar(40),
            http_status integer,
            provider_request_id varchar(200),
            excerpt jsonb,
            prev_hash varchar(64) NOT NULL,
            hash varchar(64) NOT NULL,
            row_digest varchar(64),
            operation_created_at timestamptz NOT NULL,
            CONSTRAINT pk_operation_events PRIMARY KEY (operation_id, seq, operation_created_at),
            CONSTRAINT fk_operation_events_operation_id FOREIGN KEY (operation_id)
                REFERENCES operations (operation_id)
        ) PARTITION BY RANGE (operation_created_at)
        """
    )
    op.execute("ALTER SEQUENCE operation_events_event_id_seq OWNED BY operation_events.event_id")
    op.execute(
        "CREATE INDEX ix_operation_events_event_id ON operation_events USING brin (event_id)"
    )
    op.execute(ADD_PARTITION)
    op.execute(
        f"CREATE TABLE {SCHEMA}.operation_events_default PARTITION OF operation_events DEFAULT"
    )
    op.execute(
        f"CREATE TRIGGER operation_events_no_truncate BEFORE TRUNCATE ON "
        f"{SCHEMA}.operation_events_default "
        "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_history_change()"
    )
    # Every month an operation was created in, then this month and the next two.
    op.execute(
        "SELECT jobwarden_add_history_partition(m) FROM ("
        "SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
        "AS m FROM operations UNION SELECT now() + n * interval '1 month' "
        "FROM generate_series(0, 2) n) months ORDER BY m"
    )
    op.execute(
        f"INSERT INTO operation_events ({COLUMNS}, operation_created_at) "
        f"SELECT {', '.join('e.' + c.strip() for c in COLUMNS.split(','))}, o.created_at "
        "FROM operation_events_unpartitioned e JOIN operations o USING (operation_id)"
    )
    op.execute("DROP TABLE operation_events_unpartitioned")
    # On the parent: cloned to every partition, present and future.
    op.execute(
        "CREATE TRIGGER operation_events_append_only BEFORE UPDATE OR DELETE ON operation_events "
        "FOR EACH ROW EXECUTE FUNCTION jobwarden_refuse_history_change()"
    )
    op.execute(
        "CREATE TRIGGER operation_events_no_truncate BEFORE TRUNCATE ON operation_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_history_change()"
    )
    # 0022's provider-answer tally goes with the table it was on; made again once the rows
    # are copied, so the copy itself is not counted a second time. A statement trigger with
    # a transition table is allowed on a partitioned table and sees the rows of every
    # partition an insert was routed to.
    op.execute(TALLY_PROVIDER_ANSWERS)
    op.create_table(
        "archived_histories",
        sa.Column("operation_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("partition", sa.String(63), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
        sa.Column("archived_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_archived_histories"),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_archived_histories_operation_id_operations",
        ),
    )
    op.create_index("ix_archived_histories_partition", "archived_histories", ["partition"])


def downgrade() -> None:
    # Back to one plain table; only the history still in the database comes back (an
    # archived month stays in its segments, which archived_histories no longer names).
    op.drop_index("ix_archived_histories_partition", table_name="archived_histories")
    op.drop_table("archived_histories")
    op.execute("LOCK TABLE operation_events IN ACCESS EXCLUSIVE MODE")
    op.execute("ALTER TABLE operation_events RENAME TO operation_events_partitioned")
    op.execute("ALTER INDEX pk_operation_events RENAME TO pk_operation_events_partitioned")
    op.execute(
        "ALTER TABLE operation_events_partitioned RENAME CONSTRAINT "
        "fk_operation_events_operation_id TO fk_operation_events_operation_id_partitioned"
    )
    op.execute("ALTER SEQUENCE operation_events_event_id_seq OWNED BY NONE")
    op.execute(
        """
        CREATE TABLE operation_events (
            event_id bigint NOT NULL DEFAULT nextval('operation_events_event_id_seq'),
            operation_id uuid NOT NULL,
            seq integer NOT NULL,
            actor varchar(200) NOT NULL,
            at timestamptz NOT NULL,
            from_state varchar(40),
            to_state varchar(40),
            kind varchar(40) NOT NULL,
            cause text,
            delay_source varchar(40),
            http_status integer,
            provider_request_id varchar(200),
            excerpt jsonb,
            prev_hash varchar(64) NOT NULL,
            hash varchar(64) NOT NULL,
            row_digest varchar(64),
            CONSTRAINT pk_operation_events PRIMARY KEY (event_id),
            CONSTRAINT fk_operation_events_operation_id FOREIGN KEY (operation_id)
                REFERENCES operations (operation_id),
            CONSTRAINT uq_operation_events_seq UNIQUE (operation_id, seq)
        )
        """
    )
    op.execute("ALTER SEQUENCE operation_events_event_id_seq OWNED BY operation_events.event_id")
    op.execute(
        f"INSERT INTO operation_events ({COLUMNS}) SELECT {COLUMNS} "
        "FROM operation_events_partitioned ORDER BY event_id"
    )
    op.execute("DROP TABLE operation_events_partitioned")
    op.execute(f"DROP SCHEMA {SCHEMA}")
    op.execute("DROP FUNCTION jobwarden_add_history_partition(timestamptz)")
    op.execute(
        "CREATE TRIGGER operation_events_append_only BEFORE UPDATE OR DELETE ON operation_events "
        "FOR EACH ROW EXECUTE FUNCTION jobwarden_refuse_history_change()"
    )
    op.execute(
        "CREATE TRIGGER operation_events_no_truncate BEFORE TRUNCATE ON operation_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION jobwarden_refuse_history_change()"
    )
    # 0022's provider-answer tally goes with the table it was on; made again once the rows
    # are copied, so the copy itself is not counted a second time. A statement trigger with
    # a transition table is allowed on a partitioned table and sees the rows of every
    # partition an insert was routed to.
    op.execute(TALLY_PROVIDER_ANSWERS)
