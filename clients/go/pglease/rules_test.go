package pglease_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

// TestClassifyRulesCases classifies every case of test/clients/rules_cases.json
// (the table of docs/client-rules.md, shared by every client's test) as the
// page says.
func TestClassifyRulesCases(t *testing.T) {
	var cases [][3]*string
	readCases(t, "rules_cases.json", &cases, 20)
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	for i, c := range cases {
		code, message, want := str(c[0]), str(c[1]), str(c[2])
		name := code
		if name == "" {
			name = "no_SQLSTATE"
		}
		t.Run(fmt.Sprintf("%02d_%s_%s", i+1, name, want), func(t *testing.T) {
			if got := pglease.Classify(code, message); string(got) != want {
				t.Errorf("Classify(%q, %q) = %s, want %s", code, message, got, want)
			}
		})
	}
}

// TestAmbiguousNoticeCases answers every notice of
// test/clients/notice_cases.json (severity, SQLSTATE, primary message, and
// "ambiguous" or "ignore") as docs/client-rules.md says.
func TestAmbiguousNoticeCases(t *testing.T) {
	var cases [][4]*string
	readCases(t, "notice_cases.json", &cases, 5)
	for i, c := range cases {
		severity, message, want := *c[0], "", *c[3]
		if c[2] != nil {
			message = *c[2]
		}
		t.Run(fmt.Sprintf("%02d_%s_%s", i+1, severity, want), func(t *testing.T) {
			if got := pglease.AmbiguousNotice(severity, message); got != (want == "ambiguous") {
				t.Errorf("AmbiguousNotice(%q, %q) = %v, want %s", severity, message, got, want)
			}
		})
	}
}

// readCases reads test/clients/<file> (a JSON array, shared by every
// client's test) into *cases, a slice, and fails unless it holds at least
// atLeast of them.
func readCases(t *testing.T, file string, cases interface{}, atLeast int) {
	t.Helper()
	data, err := os.ReadFile("../../../test/clients/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, cases); err != nil {
		t.Fatal(err)
	}
	if n := reflect.ValueOf(cases).Elem().Len(); n < atLeast {
		t.Fatalf("%s: %d cases, want at least %d", file, n, atLeast)
	}
}
