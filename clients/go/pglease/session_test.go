package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v4"
	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

// TestSessionFollowsRules: what a Session does with each class of the rules
// table, against the server: a function raises the given SQLSTATE (or ends
// its own connection) the first times it is called, then answers.
func TestSessionFollowsRules(t *testing.T) {
	workerDSN(t)
	t.Parallel()
	conn := admin(t)
	exec(t, conn, `CREATE OR REPLACE FUNCTION public.go_rules_fail(seq regclass, code text, message text, times int)
	    RETURNS text LANGUAGE plpgsql AS $$
	    BEGIN
	        IF pg_catalog.nextval(seq) <= times THEN
	            IF code = 'terminate' THEN
	                PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid());
	            END IF;
	            RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
	        END IF;
	        RETURN 'answered';
	    END $$`)
	notHeld := `lease "s-1" of stream "orders" is not held by "w1" at epoch 1`
	cases := []struct {
		code, message string
		times         int
		once          bool   // CallOnce instead of Call
		want          string // "answered", "raised", "ambiguous", "unavailable"
		calls         int
	}{
		{"40001", "conflict", 2, false, "answered", 3},
		{"40P01", "deadlock", 2, false, "answered", 3},
		{"55P03", "lock timeout", 2, false, "answered", 3},
		{"57014", "canceled", 2, false, "answered", 3},
		{"40001", "conflict", 9, false, "unavailable", pglease.Tries},
		{"53300", "too many connections", 2, false, "answered", 3},
		{"57P03", "cannot connect now", 1, false, "answered", 2},
		{"25006", "read-only", 1, false, "answered", 2},
		{"57P01", "terminating connection due to administrator command", 1, false, "answered", 2},
		{"08006", "connection failure", 1, false, "answered", 2},
		{"terminate", "", 1, false, "answered", 2},
		{"terminate", "", 1, true, "ambiguous", 1},
		{"57P02", "crash shutdown", 1, true, "ambiguous", 1},
		{"XX000", "PL/Proxy function lease.renew_leases(4): query timeout", 1, true, "ambiguous", 1},
		{"XX000", "pg_lease: a bug", 1, false, "raised", 1},
		{"22023", "bad input", 1, false, "raised", 1},
		{"42501", "permission denied", 1, false, "raised", 1},
		{"55000", "conversation 42 has ended", 1, false, "raised", 1},
		{"55000", notHeld, 1, false, "raised", 1}, // drop: raised to the worker, which drops the shard
	}
	for i, c := range cases {
		c := c
		name := fmt.Sprintf("%02d_%s_%s", i+1, c.code, c.want)
		if c.once {
			name += "_once"
		}
		t.Run(name, func(t *testing.T) {
			rows, calls, err := countedCall(t, conn, fmt.Sprintf("public.go_rules_%02d", i+1), c.once,
				"SELECT public.go_rules_fail($1::regclass, $2, $3, $4)", c.code, c.message, c.times)
			var amb *pglease.AmbiguousError
			var un *pglease.UnavailableError
			got := "raised"
			switch {
			case err == nil && len(rows) == 1 && rows[0][0] == "answered":
				got = "answered"
			case errors.As(err, &amb):
				got = "ambiguous"
			case errors.As(err, &un):
				got = "unavailable"
			}
			if got != c.want || calls != fmt.Sprint(c.calls) {
				t.Errorf("%s %q, failing %d times: %s after %s calls (%v), want %s after %d",
					c.code, c.message, c.times, got, calls, err, c.want, c.calls)
			}
		})
	}
}

// TestSessionSyncRepWarning: a call answered with the WARNING of a cancelled
// wait for synchronous replication is ambiguous, not success
// (docs/client-rules.md), as the server sends it (a function raises it the
// first times it is called): CallOnce returns an *AmbiguousError at once;
// Call tries again, then returns an *UnavailableError after the rules'
// tries; the same text at NOTICE is no warning at all.
func TestSessionSyncRepWarning(t *testing.T) {
	workerDSN(t)
	t.Parallel()
	conn := admin(t)
	exec(t, conn, `CREATE OR REPLACE FUNCTION public.go_syncrep_warn(seq regclass, severity text, times int)
	    RETURNS text LANGUAGE plpgsql AS $$
	    BEGIN
	        IF pg_catalog.nextval(seq) <= times THEN
	            IF severity = 'WARNING' THEN
	                RAISE WARNING 'canceling wait for synchronous replication due to user request'
	                    USING DETAIL = 'The transaction has already committed locally, but might not have been replicated to the standby.';
	            ELSE
	                RAISE NOTICE 'canceling wait for synchronous replication due to user request';
	            END IF;
	        END IF;
	        RETURN 'answered';
	    END $$`)
	cases := []struct {
		severity string
		times    int
		once     bool
		want     string // "answered", "ambiguous", "unavailable"
		calls    int
	}{
		{"WARNING", 1, true, "ambiguous", 1},
		{"WARNING", 1, false, "answered", 2},
		{"WARNING", 9, false, "unavailable", pglease.Tries},
		{"NOTICE", 9, true, "answered", 1},
	}
	for i, c := range cases {
		c := c
		t.Run(fmt.Sprintf("%02d_%s_%s", i+1, c.severity, c.want), func(t *testing.T) {
			rows, calls, err := countedCall(t, conn, fmt.Sprintf("public.go_syncrep_%02d", i+1), c.once,
				"SELECT public.go_syncrep_warn($1::regclass, $2, $3)", c.severity, c.times)
			var amb *pglease.AmbiguousError
			var un *pglease.UnavailableError
			got := fmt.Sprint(err)
			const warned = "WARNING canceling wait for synchronous replication due to user request"
			switch {
			case err == nil && len(rows) == 1 && rows[0][0] == "answered":
				got = "answered"
			case errors.As(err, &amb) && strings.HasSuffix(err.Error(), "(answered with a warning): "+warned):
				got = "ambiguous"
			case errors.As(err, &un) && un.Last == warned:
				got = "unavailable"
			}
			if got != c.want || calls != fmt.Sprint(c.calls) {
				t.Errorf("%s %d times: %s after %s calls, want %s after %d", c.severity, c.times, got, calls, c.want, c.calls)
			}
		})
	}
}

// countedCall runs sql, whose first parameter is the new sequence seq it
// counts the server's runs in, through a new Session (CallOnce when once,
// Call otherwise), and returns what the call answered and how many times
// the server ran it.
func countedCall(t *testing.T, conn *pgx.Conn, seq string, once bool, sql string, args ...interface{}) ([][]interface{}, string, error) {
	t.Helper()
	exec(t, conn, "DROP SEQUENCE IF EXISTS "+seq)
	exec(t, conn, "CREATE SEQUENCE "+seq)
	s := pglease.NewSession("", t.Name())
	defer s.Close()
	call := s.Call
	if once {
		call = s.CallOnce
	}
	rows, err := call(context.Background(), sql, append([]interface{}{seq}, args...)...)
	return rows, scalar(t, conn, "SELECT last_value::text FROM "+seq), err
}
