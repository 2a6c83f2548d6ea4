/* pg_lease--0.3.0--0.4.0.sql: upgrade from 0.3.0 to 0.4.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.4.0'" to load this file. \quit

-- Issue 27, item 2: admission serializes on the one row of
-- lease.admission_gate, which only the extension's owner can lock, instead
-- of advisory locks any role may take; start_conversation and
-- rotate_channel move to the C symbols that take it (CREATE OR REPLACE with
-- the same signature keeps their grants).
CREATE TABLE lease.admission_gate (
    only_row  boolean NOT NULL DEFAULT true PRIMARY KEY,
    CONSTRAINT admission_gate_only_row_check CHECK (only_row)
);

COMMENT ON TABLE lease.admission_gate IS
    'Exactly one row, locked by every admission (start_conversation, rotate_channel) until its transaction ends. Do not lock, delete or add rows.';

INSERT INTO lease.admission_gate DEFAULT VALUES;

REVOKE ALL ON lease.admission_gate FROM PUBLIC;

CREATE OR REPLACE FUNCTION lease.start_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS TABLE (outcome text, conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_start_conversation_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.rotate_channel(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text,
    rotate_from bigint)
RETURNS TABLE (outcome text, conversation_id bigint, previous_conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_rotate_channel_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;
