package pglease

import (
	"math/rand"
	"regexp"
	"strings"
	"time"
)

// What to do when a call fails: docs/client-rules.md, as code.  The table is
// clients/rules.json's: test/clients/rules_table.py checks that these sets,
// patterns and tries are exactly the ones there, and rules_test.go that
// Classify and AmbiguousNotice answer every case of
// test/clients/rules_cases.json and notice_cases.json as the page says.

// Action is what the rules say to do after an error.
type Action string

// The actions of docs/client-rules.md's table.
const (
	// ActionRepeat: rolled back, nothing happened; repeat the same call after a short backoff.
	ActionRepeat Action = "repeat"
	// ActionReconnect: no usable connection, nothing happened; reconnect, then repeat.
	ActionReconnect Action = "reconnect"
	// ActionAmbiguous: the connection is gone and the call may or may not have committed.
	ActionAmbiguous Action = "ambiguous"
	// ActionDrop: hold_lease's "not held" (transactional mode): drop the shard, do not repeat.
	ActionDrop Action = "drop"
	// ActionFatal: the server refused the credentials or the database at
	// connect: tried like any failed connection, then the worker stops, loudly.
	ActionFatal Action = "fatal"
	// ActionRaise: a bug in the caller, a privilege, or pg_lease: do not repeat.
	ActionRaise Action = "raise"
)

// Tries is how many times a call is made before it is reported unavailable.
const Tries = 5

var (
	// rolled back, nothing happened: repeat after a short backoff
	repeatCodes = map[string]bool{"40001": true, "40P01": true, "55P03": true, "57014": true, "40L01": true}
	// no usable connection, nothing happened: reconnect, then repeat
	reconnectCodes = map[string]bool{"53300": true, "57P03": true, "25006": true}
	// the connection is gone (so is any error without a SQLSTATE, and every
	// class 08 error): the call may or may not have committed
	ambiguousCodes = map[string]bool{"57P01": true, "57P02": true}

	// plproxyConnectionLost: through the router, PL/Proxy's own XX000 whose
	// message names a lost partition connection (or a timeout on it) is
	// ambiguous too; any other XX000 is raised.
	plproxyConnectionLost = regexp.MustCompile(`^PL/Proxy function [^ ]+ (\[[^ ]+\] )?(PQconnectStart|PQconnectPoll|PQsendQuery|PQflush|PQconsumeInput|connect timeout|query timeout)`)

	// leaseNotHeld: transactional mode, hold_lease's 55000 (the lease is not
	// held at the worker's epoch): drop the shard.  Any other 55000 is raised.
	leaseNotHeld = regexp.MustCompile(`(^|REMOTE ERROR: )lease .+ is not held by `)
	// the server refused these credentials or this database, at connect: a
	// configuration error no retry fixes
	fatalCodes = map[string]bool{"28P01": true, "28000": true, "3D000": true}
	// connectRefused: the same refusal from a driver that gives no SQLSTATE
	// at connect, matched only when there is none
	connectRefused = regexp.MustCompile(`(password authentication failed|Peer authentication failed|Ident authentication failed|no pg_hba\.conf entry|role "[^"]+" does not exist|database "[^"]+" does not exist)`)

	// syncRepCancelled: a call, or the COMMIT of a transaction, that comes
	// back with this WARNING committed locally but may not have been
	// replicated (a waiting backend's synchronous replication wait was
	// cancelled, by an operator or a failover manager): ambiguous, not success.
	syncRepCancelled = regexp.MustCompile(`canceling (the )?wait for synchronous replication`)
)

// AmbiguousNotice reports whether a notice (its severity and primary message)
// makes the call that raised it ambiguous: the cancelled wait for synchronous
// replication.  A Session checks every call's notices; a caller running its
// own transaction checks those of its COMMIT (pgconn.Config.OnNotice).
func AmbiguousNotice(severity, message string) bool {
	return severity == "WARNING" && syncRepCancelled.MatchString(message)
}

// Classify returns what to do after an error with the given SQLSTATE ("" when
// the error carried none: the socket closed, the driver failed before an
// answer) and primary message.
func Classify(sqlstate, message string) Action {
	switch {
	case fatalCodes[sqlstate] || (sqlstate == "" && connectRefused.MatchString(message)):
		return ActionFatal
	case sqlstate == "" || strings.HasPrefix(sqlstate, "08") || ambiguousCodes[sqlstate]:
		return ActionAmbiguous
	case sqlstate == "XX000" && plproxyConnectionLost.MatchString(message):
		return ActionAmbiguous
	case sqlstate == "55000" && leaseNotHeld.MatchString(message):
		return ActionDrop
	case repeatCodes[sqlstate]:
		return ActionRepeat
	case reconnectCodes[sqlstate]:
		return ActionReconnect
	}
	return ActionRaise
}

// backoff is how long to wait before try number attempt+1 (random, growing).
func backoff(attempt int) time.Duration {
	base := 20 * time.Millisecond << uint(attempt)
	if base > time.Second {
		base = time.Second
	}
	return time.Duration(float64(base) * (0.5 + rand.Float64()))
}
