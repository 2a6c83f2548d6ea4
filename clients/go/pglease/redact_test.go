package pglease

import "testing"

// TestRedactPassword: every way a connection string carries a password.
func TestRedactPassword(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`cannot parse "postgres://u:s3cret@[::1/db": missing ']'`, `cannot parse "postgres://u:xxxxx@[::1/db": missing ']'`},
		{"postgresql:///db?host=/tmp&password=s3cret&user=u", "postgresql:///db?host=/tmp&password=xxxxx&user=u"},
		{"host=h password='s3 \\' cret' user=u", "host=h password=xxxxx user=u"},
		{"host=h PASSWORD = s3cret user=u", "host=h PASSWORD = xxxxx user=u"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
	} {
		if got := redactPassword(c.in); got != c.want {
			t.Errorf("redactPassword(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
