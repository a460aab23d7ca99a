// Unit tests of the Go example under `go test`, against `durasync harness`
// (the host's own rules), no component built:
//
//	DURASYNC=target/debug/durasync durasync-go test plugins/example-go
package export_wit_world

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
)

func start(t *testing.T, o durasync.HarnessOptions) *durasync.Harness {
	t.Helper()
	h, err := durasync.StartHarness(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func ok(t *testing.T, r witTypes.Result[string, string]) string {
	t.Helper()
	if r.Tag() != witTypes.ResultOk {
		t.Fatalf("the run failed: %s", r.Err())
	}
	return r.Ok()
}

func failed(t *testing.T, r witTypes.Result[string, string]) string {
	t.Helper()
	if r.Tag() != witTypes.ResultErr {
		t.Fatalf("the run succeeded: %s", r.Ok())
	}
	return r.Err()
}

func files(t *testing.T, h *durasync.Harness) map[string]durasync.FileState {
	t.Helper()
	f, err := h.Files("out")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLinesBecomeFilesThenUnchangedThenReplaced(t *testing.T) {
	h := start(t, durasync.HarnessOptions{Roots: []string{"out"}})
	if got := ok(t, Run("{}", []byte("A=1\n# note\n\nB = two\n"))); got != "env: created (2 written, 0 removed)" {
		t.Fatal(got)
	}
	want := map[string]durasync.FileState{"env/A": {0o644, "1\n"}, "env/B": {0o644, "two\n"}}
	if got := files(t, h); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	if got := ok(t, Run("{}", []byte("B=two\nA=1"))); got != "env: unchanged (0 written, 0 removed)" {
		t.Fatal(got)
	}
	if got := ok(t, Run("{}", []byte("A=3"))); got != "env: replaced (1 written, 1 removed)" {
		t.Fatal(got)
	}
	if got := files(t, h); !reflect.DeepEqual(got, map[string]durasync.FileState{"env/A": {0o644, "3\n"}}) {
		t.Fatalf("%v", got)
	}
	var seen []string
	for _, op := range h.Operations() {
		seen = append(seen, op["op"].(string)+" "+op["outcome"].(string))
	}
	if strings.Join(seen, ", ") != "sync created, sync unchanged, sync replaced" {
		t.Fatal(seen)
	}
}

func TestALineWithoutEqualsFailsNamingItAndWritesNothing(t *testing.T) {
	h := start(t, durasync.HarnessOptions{Roots: []string{"out"}})
	if got := failed(t, Run("{}", []byte("A=1\noops\n"))); got != `not KEY=value: "oops"` {
		t.Fatal(got)
	}
	if got := files(t, h); len(got) != 0 || len(h.Operations()) != 0 {
		t.Fatalf("%v %v", got, h.Operations())
	}
}

func TestABadNameIsTheHostsInvalidPathErrorAsText(t *testing.T) {
	h := start(t, durasync.HarnessOptions{Roots: []string{"out"}})
	if got := failed(t, Run("{}", []byte("..=1"))); !strings.HasPrefix(got, "invalid-path: ") {
		t.Fatal(got)
	}
	if h.Operations()[0]["outcome"] != "failed" {
		t.Fatal(h.Operations())
	}
}

func TestADryRunPlansAndChangesNothing(t *testing.T) {
	h := start(t, durasync.HarnessOptions{Roots: []string{"out"}, DryRun: true})
	if got := ok(t, Run("{}", []byte("A=1"))); got != "env: created (1 written, 0 removed)" {
		t.Fatal(got)
	}
	if got := files(t, h); len(got) != 0 {
		t.Fatal(got)
	}
	plan := h.Operations()[0]["plan"].(map[string]any)
	if !reflect.DeepEqual(plan["added"], []any{"A"}) {
		t.Fatal(plan)
	}
}

func TestTheManifestsAccessAndLimitsApply(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "plugin.toml")
	head := "name = \"example-go\"\nwasm = \"x.wasm\"\nsha256 = \"" + strings.Repeat("0", 64) + "\"\n"
	os.WriteFile(manifest, []byte(head+"[roots.out]\npath = \"out\"\naccess = \"ro\"\n"), 0o644)
	h := start(t, durasync.HarnessOptions{Roots: []string{"out"}, Manifest: manifest})
	if got := failed(t, Run("{}", []byte("A=1"))); !strings.HasPrefix(got, "read-only: root `out`") {
		t.Fatal(got)
	}
	h.Close()
	os.WriteFile(manifest, []byte(head+"[roots.out]\npath = \"out\"\naccess = \"rw\"\n[limits]\nwrite_files = 1\n"), 0o644)
	h = start(t, durasync.HarnessOptions{Roots: []string{"out"}, Manifest: manifest})
	if got := failed(t, Run("{}", []byte("A=1\nB=2"))); !strings.Contains(got, "limits.write_files") {
		t.Fatal(got)
	}
	if got := files(t, h); len(got) != 0 {
		t.Fatal(got)
	}
}
