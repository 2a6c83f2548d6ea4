package pglease

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// AmbiguousError reports a call whose connection was lost after it was sent,
// or whose answer came with the WARNING of a cancelled wait for synchronous
// replication: it may or may not have committed.  Only calls made with
// CallOnce return it.
type AmbiguousError struct{ Err error }

func (e *AmbiguousError) Error() string {
	var n *noticeError
	if errors.As(e.Err, &n) {
		return "outcome unknown (answered with a warning): " + e.Err.Error()
	}
	return "outcome unknown (connection lost): " + e.Err.Error()
}
func (e *AmbiguousError) Unwrap() error { return e.Err }

// UnavailableError reports a call that did not go through after its retries;
// nothing is known to have happened.
type UnavailableError struct {
	Call string // the statement, up to its first parenthesis
	Last string // the last failure
}

func (e *UnavailableError) Error() string { return e.Call + ": " + e.Last }

// Transient reports whether err is one the rules leave to the next try
// (an UnavailableError or an AmbiguousError), not one to raise.
func Transient(err error) bool {
	var u *UnavailableError
	var a *AmbiguousError
	return errors.As(err, &u) || errors.As(err, &a)
}

// Session is one autocommit connection that runs pg_lease calls, each its
// own transaction, retrying them as docs/client-rules.md says.  It is not
// safe for concurrent use.
type Session struct {
	connString      string
	applicationName string
	conn            *pgx.Conn
	runtimeParams   map[string]string // set on every connection (the worker's statement and lock timeouts)
	connectTimeout  time.Duration     // 0: the connection string's
	// the primary message of the first notice of the statement in progress
	// that makes it ambiguous (AmbiguousNotice), "" when none came
	warning string
}

// noticeError is an answer that came with a notice making it ambiguous.
type noticeError struct{ message string }

func (e *noticeError) Error() string { return "WARNING " + e.message }

// NewSession returns a session on connString (a libpq URL or key=value
// string; PG* environment variables fill in what it leaves out) that
// connects when first used.
func NewSession(connString, applicationName string) *Session {
	return &Session{connString: connString, applicationName: applicationName}
}

func (s *Session) connect(ctx context.Context) (*pgx.Conn, error) {
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	cfg, err := pgx.ParseConfig(s.connString)
	if err != nil {
		// pgconn hides a URL's user:password@, but not a password=
		// parameter, and net/url's own error quotes the whole URL
		return nil, errors.New(redactPassword(err.Error()))
	}
	if s.applicationName != "" {
		cfg.RuntimeParams["application_name"] = s.applicationName
	}
	for k, v := range s.runtimeParams {
		cfg.RuntimeParams[k] = v
	}
	if s.connectTimeout > 0 {
		cfg.ConnectTimeout = s.connectTimeout
	}
	// pgx delivers notices here, on the goroutine reading the statement's answer
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if s.warning == "" && AmbiguousNotice(n.Severity, n.Message) {
			s.warning = n.Message
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	return conn, nil
}

var (
	urlPassword   = regexp.MustCompile(`(://[^:/?#@\s]*:)[^@\n]*@`)
	paramPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(\\.|[^'])*'|[^\s&]*)`)
)

// redactPassword is s (an error's text) with the password of every
// connection string in it replaced by xxxxx: the user:password@ of a URL,
// a password= parameter of a URL or of key=value settings.
func redactPassword(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}xxxxx@")
	return paramPassword.ReplaceAllString(s, "${1}xxxxx")
}

// Close closes the connection; the next call opens another.
func (s *Session) Close() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.conn.Close(ctx)
		s.conn = nil
	}
}

// sqlState returns an error's SQLSTATE ("" when it has none) and primary message.
func sqlState(err error) (string, string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.Message
	}
	return "", err.Error()
}

func firstLine(s string) string {
	return strings.SplitN(strings.TrimSpace(s), "\n", 2)[0]
}

// Call returns the rows of one statement (each row's values as pgx decodes
// them: text as string, bigint as int64, NULL as nil), repeating it per the
// rules; it is for the calls that are safe to repeat after an ambiguous
// commit.  It returns an *UnavailableError when the call did not go through
// after its retries, and the driver's error for anything the rules say to
// raise.  No repeat starts once ctx is done.
func (s *Session) Call(ctx context.Context, sql string, args ...interface{}) ([][]interface{}, error) {
	return s.call(ctx, true, sql, args...)
}

// CallOnce is Call for a call that is not safe to repeat blindly
// (rotate_channel): a lost connection returns an *AmbiguousError.
func (s *Session) CallOnce(ctx context.Context, sql string, args ...interface{}) ([][]interface{}, error) {
	return s.call(ctx, false, sql, args...)
}

func (s *Session) call(ctx context.Context, repeatSafe bool, sql string, args ...interface{}) ([][]interface{}, error) {
	last := "not sent"
	for attempt := 0; attempt < Tries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(backoff(attempt)):
			}
			if ctx.Err() != nil {
				break
			}
		}
		conn, err := s.connect(ctx)
		if err != nil {
			// Nothing was sent.  A server that refuses this role, password or
			// database (28000, 28P01, 3D000: fatal) is tried like any failed
			// connection, then returned: loud failure.  Any other error the
			// rules raise is returned at once.
			code, message := sqlState(err)
			if code == "" {
				message = err.Error()
			}
			switch Classify(code, message) {
			case ActionFatal:
				if attempt == Tries-1 {
					return nil, err
				}
			case ActionRaise:
				if code != "" {
					return nil, err
				}
			}
			last = firstLine(err.Error())
			continue
		}
		s.warning = ""
		rows, err := s.query(ctx, conn, sql, args...)
		if err == nil && s.warning == "" {
			return rows, nil
		}
		if err == nil {
			// committed locally, perhaps only here: ambiguous, not success
			warned := &noticeError{s.warning}
			last = warned.Error()
			if !repeatSafe {
				return nil, &AmbiguousError{Err: warned}
			}
			continue
		}
		code, message := sqlState(err)
		if code == "" {
			last = "no SQLSTATE " + firstLine(err.Error())
		} else {
			last = code + " " + firstLine(message)
		}
		kind := Classify(code, message)
		if conn.IsClosed() && kind != ActionReconnect {
			kind = ActionAmbiguous // the driver lost the connection
		}
		if kind == ActionRaise || kind == ActionDrop || kind == ActionFatal {
			return nil, err
		}
		if kind != ActionRepeat {
			s.Close()
		}
		if kind == ActionAmbiguous && !repeatSafe {
			return nil, &AmbiguousError{Err: err}
		}
	}
	return nil, &UnavailableError{Call: strings.SplitN(sql, "(", 2)[0], Last: last}
}

func (s *Session) query(ctx context.Context, conn *pgx.Conn, sql string, args ...interface{}) ([][]interface{}, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]interface{}
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, values)
	}
	return out, rows.Err()
}

// One returns the first column of the only row of a Call.
func (s *Session) One(ctx context.Context, sql string, args ...interface{}) (interface{}, error) {
	rows, err := s.Call(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	if len(rows) != 1 || len(rows[0]) == 0 {
		return nil, fmt.Errorf("%s: %d rows, want 1", strings.SplitN(sql, "(", 2)[0], len(rows))
	}
	return rows[0][0], nil
}
