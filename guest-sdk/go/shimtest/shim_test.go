// The Go helper's native side (harness.go) under `go test` against `durasync
// harness`: every Dir method, logging, errors, traps, Run and Quote (run by
// tests/plugins/harness.rs with `durasync-go test guest-sdk/go/shimtest`).
package export_wit_world

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
)

// must is v, or a panic (the test fails) naming err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestEveryDirMethodReachesTheHost(t *testing.T) {
	h := must(durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}}))
	defer h.Close()
	root := must(durasync.OpenRoot("out"))
	if r := must(root.WriteFile("a/f", []byte{1, 2}, 0o600)); r != (durasync.Report{Outcome: durasync.Created, Written: 1}) {
		t.Fatal(r)
	}
	b, found, err := root.ReadFile("a/f")
	if err != nil || !found || !reflect.DeepEqual(b, []byte{1, 2}) {
		t.Fatal(b, found, err)
	}
	if _, found, err := root.ReadFile("a/missing"); found || err != nil {
		t.Fatal(found, err)
	}
	must(root.Sync("d", []durasync.File{durasync.NewFile("x", []byte{0, 255})}))
	entries := must(root.ListDir(""))
	want := []durasync.Entry{{Name: "a", Kind: durasync.KindDirectory}, {Name: "d", Kind: durasync.KindDirectory}}
	if !reflect.DeepEqual(entries, want) {
		t.Fatal(entries)
	}
	sub := must(root.OpenDir("d"))
	if b, _, _ := sub.ReadFile("x"); !reflect.DeepEqual(b, []byte{0, 255}) {
		t.Fatal(b)
	}
	sub.Close()
	if err := root.Exchange("a", "d"); err != nil {
		t.Fatal(err)
	}
	if err := root.Fsync("a"); err != nil {
		t.Fatal(err)
	}
	if removed := must(root.Remove("d")); !removed {
		t.Fatal("not removed")
	}
	if removed := must(root.Remove("d")); removed {
		t.Fatal("removed twice")
	}
	durasync.Warnf("careful %d\n", 1)
	if logs := h.Logs(); !reflect.DeepEqual(logs, []string{"warn: careful 1\\n"}) {
		t.Fatal(logs)
	}
	files := must(h.Files("out"))
	if !reflect.DeepEqual(files, map[string]durasync.FileState{"a/x": {Mode: 0o644, Contents: "\x00\xff"}}) {
		t.Fatal(files)
	}
	var ops []string
	for _, op := range h.Operations() {
		ops = append(ops, op["op"].(string))
	}
	if strings.Join(ops, " ") != "write-file sync exchange fsync remove remove" {
		t.Fatal(ops)
	}
}

func TestHostErrorsAreErrorsWithTheirKind(t *testing.T) {
	h := must(durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}}))
	defer h.Close()
	_, err := durasync.OpenRoot("other")
	var e *durasync.Error
	if !errors.As(err, &e) || e.Kind != durasync.NotGranted || !strings.HasPrefix(err.Error(), "not-granted: ") {
		t.Fatal(err)
	}
	root := must(durasync.OpenRoot("out"))
	_, missing := root.OpenDir("nope")
	if !errors.As(missing, &e) || e.Kind != durasync.NotFound {
		t.Fatal(missing)
	}
	r := durasync.Run(func() (string, error) { return "", missing })
	if r.Tag() != witTypes.ResultErr || !strings.HasPrefix(r.Err(), "not-found: ") {
		t.Fatal(r)
	}
}

func TestATrapPanics(t *testing.T) {
	h := must(durasync.StartHarness(durasync.HarnessOptions{Roots: []string{"out"}, MaxCalls: 2}))
	defer h.Close()
	must(durasync.OpenRoot("out"))
	must(durasync.OpenRoot("out"))
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "more than 2 calls") {
			t.Fatal(p)
		}
	}()
	durasync.OpenRoot("out")
	t.Fatal("no trap")
}

func TestQuoteIsRustsDebugOfAString(t *testing.T) {
	if got := durasync.Quote("a\"b\\c\td\ne\x01\x7f\u0085é"); got != `"a\"b\\c\td\ne\u{1}\u{7f}\u{85}é"` {
		t.Fatal(got)
	}
}
