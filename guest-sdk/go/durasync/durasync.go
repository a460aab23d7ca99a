// Package durasync is the Go side of a durasync plugin: typed calls to the
// host (roots, directory sync, single-file writes, reads), host errors as Go
// errors printed like the Rust SDK prints them (`invalid-path: …`), logging,
// and the memory discipline a Go plugin needs to survive many host calls.
//
// In the component (GOOS=wasip1, `wasm.go`) it wraps the bindings
// `durasync-go build` generates (module `wit_component`); under `go test`
// (`durasync-go test`, any other GOOS, `harness.go`) the same API is served
// by `durasync harness`, the host's own rules, so plugin code is unit-tested
// natively. A plugin imports it as "wit_component/durasync" and implements
// `Describe` and `Run` in package `export_wit_world`:
//
//	func Run(config string, input []uint8) witTypes.Result[string, string] {
//		return durasync.Run(func() (string, error) {
//			root, err := durasync.OpenRoot("out")
//			if err != nil {
//				return "", err
//			}
//			report, err := root.Sync("env", []durasync.File{durasync.NewFile("A", []byte("1\n"))})
//			if err != nil {
//				return "", err
//			}
//			return "env: " + report.Outcome.String(), nil
//		})
//	}
//
// # The garbage collector (read this)
//
// Go's collector must never run inside `cabi_realloc`, the function the
// host calls to allocate a host call's results in the plugin's memory: it
// reads the clock there, a host call the component model forbids at that
// point, and the run traps with "cannot leave component instance"
// (wasmtime issue 14318). So this package switches automatic collection
// off when the plugin starts and collects explicitly between host calls,
// once the heap has grown by [CollectEvery] bytes. A plugin that allocates
// a lot without calling the host should call [Collect] now and then.
//
// The generated bindings also keep every value a host call returned
// reachable (pinned) until the export returns; every wrapper here releases
// them after the call, once they are Go values, so a run making thousands of
// calls does not hold all their results.
package durasync

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// CollectEvery is how many bytes the plugin may allocate between two
// collections (32 MiB). With a memory limit of L, keep the live heap under
// about L/2 - CollectEvery.
const CollectEvery = 32 << 20

var (
	allocs       = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocsAtLast uint64
)

// Collect runs the garbage collector if the plugin allocated more than
// [CollectEvery] bytes since the last collection. Safe to call at any point
// of a plugin's own code (never from inside a host call, which a plugin
// cannot do anyway).
func Collect() {
	metrics.Read(allocs)
	now := allocs[0].Value.Uint64()
	if now-allocsAtLast > CollectEvery {
		runtime.GC()
		metrics.Read(allocs)
		allocsAtLast = allocs[0].Value.Uint64()
	}
}

// Run turns a plugin's `(message, error)` into the export's result: the
// message on success, the error's text on failure. A panic is not caught:
// it traps the plugin and the host shows its message.
func Run(run func() (string, error)) witTypes.Result[string, string] {
	message, err := run()
	if err != nil {
		return witTypes.Err[string, string](err.Error())
	}
	return witTypes.Ok[string, string](message)
}

// Error is an error the host returned. Its text is `kind: message`, as the
// Rust SDK prints it; Kind is the WIT case name (`invalid-path`,
// `not-granted`, `read-only`, `not-found`, `not-a-directory`, `limit`,
// `unsupported`, `committed`, `io`).
type Error struct {
	Kind    string
	Message string
}

func (e *Error) Error() string { return e.Kind + ": " + e.Message }

// The error kinds, as [Error.Kind] holds them.
const (
	InvalidPath   = "invalid-path"
	NotGranted    = "not-granted"
	ReadOnly      = "read-only"
	NotFound      = "not-found"
	NotADirectory = "not-a-directory"
	Limit         = "limit"
	Unsupported   = "unsupported"
	Committed     = "committed"
	Io            = "io"
)

// Outcome is what a mutating call did.
type Outcome uint8

// The outcomes.
const (
	Unchanged Outcome = iota
	Created
	Replaced
	Removed
)

// String is the WIT case name: `unchanged`, `created`, `replaced`, `removed`.
func (o Outcome) String() string {
	switch o {
	case Unchanged:
		return "unchanged"
	case Created:
		return "created"
	case Replaced:
		return "replaced"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Report is the result of a successful mutating call: when it is returned
// the change has reached stable storage.
type Report struct {
	Outcome Outcome
	// Files written into the new contents.
	Written uint32
	// Files of the old contents that the new contents no longer hold.
	Removed uint32
}

// DefaultMode is the mode of [NewFile]: 0644.
const DefaultMode = 0o644

// File is one regular file of a directory sync.
type File struct {
	// Path relative to the synced directory (`tls.crt`, `sub/file`).
	Name string
	// The exact bytes.
	Contents []byte
	// Permission bits, applied exactly (the host's umask does not change them).
	Mode uint32
}

// NewFile is a file with mode [DefaultMode].
func NewFile(name string, contents []byte) File {
	return File{name, contents, DefaultMode}
}

// EntryKind is what a directory entry is (symbolic links are never followed).
type EntryKind uint8

// The entry kinds.
const (
	KindFile EntryKind = iota
	KindDirectory
	KindSymlink
	KindOther
)

// Entry is one entry of [Dir.ListDir].
type Entry struct {
	Name string
	Kind EntryKind
}

// Debugf logs a message for the operator (the host caps log volume per run).
func Debugf(format string, args ...any) { logAt("debug", format, args) }

// Infof logs a message for the operator.
func Infof(format string, args ...any) { logAt("info", format, args) }

// Warnf logs a message for the operator.
func Warnf(format string, args ...any) { logAt("warn", format, args) }

// Errorf logs a message for the operator.
func Errorf(format string, args ...any) { logAt("error", format, args) }

// Quote is Rust's `{:?}` of a string (what the Rust SDK's messages show):
// double quotes, `\"`, `\\`, `\t`, `\r`, `\n`, and `\u{…}` for other
// characters that are not printable.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		case '\x00':
			b.WriteString(`\0`)
		default:
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				fmt.Fprintf(&b, `\u{%x}`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
