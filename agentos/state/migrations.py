"""The state database's migrations: ordered, named, one list per backend.

A database is brought up to date by applying, in order, the names it has not recorded,
each in its own transaction. One that records a name this AgentOS does not know was
written by a newer AgentOS, and is refused (:func:`agentos.state.database.unknown`).
SQLite's list grew one step at a time since the first release; PostgreSQL's starts with
the whole schema of its time and grows alongside. The tables are the same on both, in
each dialect's types, so that the stores run one set of queries.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str


SQLITE_MIGRATIONS: list[Migration] = [
    Migration(
        "001_runs",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            request TEXT NOT NULL,
            repo TEXT NOT NULL,
            target_branch TEXT,
            base_commit TEXT,
            status TEXT NOT NULL,
            decision TEXT,
            receipt TEXT,
            pid INTEGER,
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            message TEXT
        );
        CREATE INDEX runs_status ON runs(status);
        CREATE TABLE run_agents (
            run_id TEXT NOT NULL REFERENCES runs(id),
            agent TEXT NOT NULL,
            version TEXT NOT NULL,
            card TEXT,
            branch TEXT,
            worktree TEXT,
            session TEXT,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER,
            restarts INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            ended_at REAL,
            PRIMARY KEY (run_id, agent)
        );
        """,
    ),
    Migration(
        "002_interventions",
        """
        CREATE TABLE interventions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            receipt TEXT,
            at REAL NOT NULL
        );
        CREATE INDEX interventions_run ON interventions(run_id, agent);
        """,
    ),
    Migration(
        "003_runs_pid_start",
        # When the orchestrator's process started: with the pid, it tells a live
        # orchestrator from an unrelated process that reused its pid.
        "ALTER TABLE runs ADD COLUMN pid_start TEXT",
    ),
    Migration(
        "004_review_before_merge",
        # What a run needs to be reviewed and merged later (``run --no-merge``, ``runs
        # merge``): each agent's last gate result (JSON), the commit that gate judged, its
        # gate receipts (JSON list), and the run's options (JSON).
        """
        ALTER TABLE run_agents ADD COLUMN gate TEXT;
        ALTER TABLE run_agents ADD COLUMN gated_commit TEXT;
        ALTER TABLE run_agents ADD COLUMN receipts TEXT;
        ALTER TABLE runs ADD COLUMN options TEXT;
        """,
    ),
    Migration(
        "005_workflows",
        # Workflow executions and their tasks (agentos.workflows). A task's words and names
        # (its similarity features) are kept so that a new task is compared with thousands
        # of live ones through an index, not by reading them all.
        """
        CREATE TABLE executions (
            id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            definition TEXT NOT NULL,
            repo TEXT NOT NULL,
            parameters TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            created_at REAL NOT NULL,
            ended_at REAL
        );
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            execution TEXT NOT NULL REFERENCES executions(id),
            phase INTEGER NOT NULL,
            description TEXT NOT NULL,
            status TEXT NOT NULL,
            parent INTEGER,
            creator TEXT NOT NULL,
            duplicate_of INTEGER,
            related_to INTEGER,
            similarity REAL,
            run_id TEXT,
            message TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            started_at REAL,
            ended_at REAL,
            words TEXT NOT NULL,
            names TEXT NOT NULL
        );
        CREATE INDEX tasks_by_execution ON tasks(execution, phase, status);
        CREATE TABLE task_terms (
            task INTEGER NOT NULL,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            nwords INTEGER NOT NULL,
            nnames INTEGER NOT NULL
        );
        CREATE INDEX task_terms_lookup
            ON task_terms(execution, phase, term, task, nwords, nnames);
        CREATE TABLE results (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            execution TEXT NOT NULL REFERENCES executions(id),
            task INTEGER,
            summary TEXT NOT NULL,
            validated INTEGER NOT NULL,
            detail TEXT NOT NULL,
            at REAL NOT NULL
        );
        """,
    ),
    Migration(
        "006_events",
        # One stream of what happened, for whoever watches (agentos events, a dashboard):
        # each event with its source (run, guardian, eval, evolve, synthesis, workflow),
        # its run or task, and a timestamp. ``seq`` is the event's place in its run.
        """
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            run TEXT,
            seq INTEGER,
            task INTEGER,
            agent TEXT,
            status TEXT,
            message TEXT NOT NULL
        );
        CREATE INDEX events_by_run ON events(run, id);
        """,
    ),
    Migration(
        "007_agent_usage",
        # What each agent used (JSON: tokens, cost), as it reports it: kept as its output
        # streams, so that a live run shows it too.
        "ALTER TABLE run_agents ADD COLUMN usage TEXT",
    ),
    Migration(
        "008_dedup_frequencies",
        # Deduplication weighs a term by how many live tasks of the execution and phase
        # hold it (issue 37): the counts kept up to date with task_terms, in the same
        # transactions; the row whose term is '' counts the live tasks themselves. And the
        # vectors of the tasks an Ollama model embedded (workflows.dedup.embeddings).
        """
        CREATE TABLE task_term_counts (
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            tasks INTEGER NOT NULL,
            PRIMARY KEY (execution, phase, term)
        ) WITHOUT ROWID;
        INSERT INTO task_term_counts (execution, phase, term, tasks)
            SELECT execution, phase, term, COUNT(*) FROM task_terms
            GROUP BY execution, phase, term;
        INSERT INTO task_term_counts (execution, phase, term, tasks)
            SELECT execution, phase, '', COUNT(DISTINCT task) FROM task_terms
            GROUP BY execution, phase;
        CREATE TABLE task_embeddings (
            task INTEGER PRIMARY KEY,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            model TEXT NOT NULL,
            vector BLOB NOT NULL
        );
        CREATE INDEX task_embeddings_by_scope ON task_embeddings(execution, phase, model);
        """,
    ),
    Migration(
        "guardian_001_agents",
        # The guardian's own tables (agentos.guardian.store): what its last cycle saw of each
        # watched agent, and the cycle itself.
        """
        CREATE TABLE guardian_agents (
            session TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            screen TEXT NOT NULL DEFAULT '',
            log_size INTEGER NOT NULL DEFAULT -1,
            changed_at REAL NOT NULL,
            prompt TEXT,
            prompt_streak INTEGER NOT NULL DEFAULT 0,
            heartbeat_at REAL,
            health TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            checked_at REAL NOT NULL
        );
        CREATE TABLE guardian_cycles (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            pid INTEGER,
            started_at REAL,
            at REAL NOT NULL,
            cycles INTEGER NOT NULL,
            agents INTEGER NOT NULL,
            interval REAL
        );
        """,
    ),
    Migration(
        "009_hosts",
        # Many machines, one state: the host that runs each run and agent (its pids and
        # paths mean something there only), who asked another host's run to cancel, and
        # each host's last heartbeat. Runs recorded before have no host: this machine's.
        """
        ALTER TABLE runs ADD COLUMN host TEXT;
        ALTER TABLE runs ADD COLUMN cancel_requested TEXT;
        ALTER TABLE run_agents ADD COLUMN host TEXT;
        CREATE TABLE hosts (id TEXT PRIMARY KEY, heartbeat_at REAL NOT NULL);
        """,
    ),
    Migration(
        "guardian_002_hosts",
        # Each host's guardian watches its own agents: its memory and its cycle are kept per
        # host. What the one guardian remembered is dropped (its next cycle sees it afresh).
        """
        ALTER TABLE guardian_agents ADD COLUMN host TEXT NOT NULL DEFAULT '';
        DELETE FROM guardian_agents;
        DROP TABLE guardian_cycles;
        CREATE TABLE guardian_cycles (
            host TEXT PRIMARY KEY,
            pid INTEGER,
            started_at REAL,
            at REAL NOT NULL,
            cycles INTEGER NOT NULL,
            agents INTEGER NOT NULL,
            interval REAL
        );
        """,
    ),
]


# PostgreSQL started with everything above in one migration: a database there is new.
POSTGRES_MIGRATIONS: list[Migration] = [
    Migration(
        "001_state",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            request TEXT NOT NULL,
            repo TEXT NOT NULL,
            target_branch TEXT,
            base_commit TEXT,
            status TEXT NOT NULL,
            decision TEXT,
            receipt TEXT,
            pid INTEGER,
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            message TEXT,
            pid_start TEXT,
            options TEXT,
            host TEXT,
            cancel_requested TEXT
        );
        CREATE INDEX runs_status ON runs(status);
        CREATE INDEX runs_created ON runs(created_at);
        CREATE TABLE run_agents (
            run_id TEXT NOT NULL REFERENCES runs(id),
            agent TEXT NOT NULL,
            version TEXT NOT NULL,
            card TEXT,
            branch TEXT,
            worktree TEXT,
            session TEXT,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER,
            restarts INTEGER NOT NULL DEFAULT 0,
            started_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            gate TEXT,
            gated_commit TEXT,
            receipts TEXT,
            usage TEXT,
            host TEXT,
            PRIMARY KEY (run_id, agent)
        );
        CREATE TABLE interventions (
            id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            receipt TEXT,
            at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX interventions_run ON interventions(run_id, agent);
        CREATE TABLE executions (
            id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            definition TEXT NOT NULL,
            repo TEXT NOT NULL,
            parameters TEXT NOT NULL,
            status TEXT NOT NULL,
            result TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            ended_at DOUBLE PRECISION
        );
        CREATE TABLE tasks (
            id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            execution TEXT NOT NULL REFERENCES executions(id),
            phase INTEGER NOT NULL,
            description TEXT NOT NULL,
            status TEXT NOT NULL,
            parent BIGINT,
            creator TEXT NOT NULL,
            duplicate_of BIGINT,
            related_to BIGINT,
            similarity DOUBLE PRECISION,
            run_id TEXT,
            message TEXT NOT NULL DEFAULT '',
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            ended_at DOUBLE PRECISION,
            words TEXT NOT NULL,
            names TEXT NOT NULL
        );
        CREATE INDEX tasks_by_execution ON tasks(execution, phase, status);
        CREATE TABLE task_terms (
            task BIGINT NOT NULL,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            nwords INTEGER NOT NULL,
            nnames INTEGER NOT NULL
        );
        CREATE INDEX task_terms_lookup
            ON task_terms(execution, phase, term, task, nwords, nnames);
        CREATE TABLE task_term_counts (
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            term TEXT NOT NULL,
            tasks INTEGER NOT NULL,
            PRIMARY KEY (execution, phase, term)
        );
        CREATE TABLE task_embeddings (
            task BIGINT PRIMARY KEY,
            execution TEXT NOT NULL,
            phase INTEGER NOT NULL,
            model TEXT NOT NULL,
            vector BYTEA NOT NULL
        );
        CREATE INDEX task_embeddings_by_scope ON task_embeddings(execution, phase, model);
        CREATE TABLE results (
            id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            execution TEXT NOT NULL REFERENCES executions(id),
            task BIGINT,
            summary TEXT NOT NULL,
            validated INTEGER NOT NULL,
            detail TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE events (
            id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            at DOUBLE PRECISION NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            run TEXT,
            seq INTEGER,
            task BIGINT,
            agent TEXT,
            status TEXT,
            message TEXT NOT NULL
        );
        CREATE INDEX events_by_run ON events(run, id);
        -- Whoever follows the stream LISTENs: each new event wakes them with its id and run.
        CREATE FUNCTION agentos_event_written() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('agentos_events', NEW.id::text || ' ' || COALESCE(NEW.run, ''));
            RETURN NULL;
        END $$;
        CREATE TRIGGER events_notify AFTER INSERT ON events
            FOR EACH ROW EXECUTE FUNCTION agentos_event_written();
        CREATE TABLE guardian_agents (
            session TEXT PRIMARY KEY,
            host TEXT NOT NULL DEFAULT '',
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            screen TEXT NOT NULL DEFAULT '',
            log_size BIGINT NOT NULL DEFAULT -1,
            changed_at DOUBLE PRECISION NOT NULL,
            prompt TEXT,
            prompt_streak INTEGER NOT NULL DEFAULT 0,
            heartbeat_at DOUBLE PRECISION,
            health TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            checked_at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE guardian_cycles (
            host TEXT PRIMARY KEY,
            pid INTEGER,
            started_at DOUBLE PRECISION,
            at DOUBLE PRECISION NOT NULL,
            cycles INTEGER NOT NULL,
            agents INTEGER NOT NULL,
            interval DOUBLE PRECISION
        );
        CREATE TABLE hosts (id TEXT PRIMARY KEY, heartbeat_at DOUBLE PRECISION NOT NULL);
        -- The receipts chain (agentos.receipts.table): each receipt's text exactly as the
        -- file would hold it, and the head (the newest receipt's id and sha256) and anchor
        -- (the same, signed: kept by AgentOS apart from the head) in one row each.
        CREATE TABLE receipts (
            seq BIGINT PRIMARY KEY CHECK (seq > 0),
            kind TEXT NOT NULL,
            time TEXT NOT NULL,
            run TEXT,
            text BYTEA NOT NULL
        );
        CREATE INDEX receipts_by_run ON receipts(run, seq);
        CREATE TABLE receipts_marks (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ),
]
