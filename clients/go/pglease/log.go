package pglease

import (
	"fmt"
	"io"
	"log"
	"os"
	"strings"
)

// Level is a log level (log/slog is not in Go 1.19: this is the standard
// log package with levels).
type Level int

// The levels, least severe first.
const (
	LevelDebug Level = iota
	LevelInfo
	LevelWarn
	LevelError
)

func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "DEBUG"
	case LevelInfo:
		return "INFO"
	case LevelWarn:
		return "WARN"
	}
	return "ERROR"
}

// ParseLevel reads "debug", "info", "warn" or "error" (any case).
func ParseLevel(s string) (Level, error) {
	for l := LevelDebug; l <= LevelError; l++ {
		if strings.EqualFold(s, l.String()) || (l == LevelWarn && strings.EqualFold(s, "warning")) {
			return l, nil
		}
	}
	return LevelInfo, fmt.Errorf("pglease: unknown log level %q", s)
}

// Logger writes lines at or above its level to a standard *log.Logger, each
// "LEVEL message".
type Logger struct {
	out *log.Logger
	min Level
}

// NewLogger returns a logger writing to out (with the standard flags: date
// and time) the lines at level min and above.
func NewLogger(out io.Writer, min Level) *Logger {
	return &Logger{out: log.New(out, "pglease: ", log.LstdFlags|log.Lmicroseconds), min: min}
}

// DefaultLogger writes to stderr the lines at the level the environment
// variable PG_LEASE_LOG_LEVEL names (debug, info, warn or error), INFO
// and above when it is not set.
func DefaultLogger() *Logger {
	level, err := ParseLevel(os.Getenv("PG_LEASE_LOG_LEVEL"))
	if err != nil {
		level = LevelInfo
	}
	return NewLogger(os.Stderr, level)
}

// Logf writes one line when level is at or above the logger's.
func (l *Logger) Logf(level Level, format string, args ...interface{}) {
	if l == nil || level < l.min {
		return
	}
	l.out.Printf("%s %s", level, fmt.Sprintf(format, args...))
}

// Debugf logs at LevelDebug.
func (l *Logger) Debugf(format string, args ...interface{}) { l.Logf(LevelDebug, format, args...) }

// Infof logs at LevelInfo.
func (l *Logger) Infof(format string, args ...interface{}) { l.Logf(LevelInfo, format, args...) }

// Warnf logs at LevelWarn.
func (l *Logger) Warnf(format string, args ...interface{}) { l.Logf(LevelWarn, format, args...) }

// Errorf logs at LevelError.
func (l *Logger) Errorf(format string, args ...interface{}) { l.Logf(LevelError, format, args...) }
