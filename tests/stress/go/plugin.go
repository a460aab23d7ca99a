// A Go plugin that makes many host calls returning strings and lists while
// it allocates: the stress test of wasmtime issue 14318 (Go's collector
// running inside cabi_realloc traps "cannot leave component instance") and
// of the helper package's discipline against it (automatic collection off,
// explicit collections between host calls, pins released after each call).
//
// Input: `CALLS` or `gc-on CALLS`. The root `data` holds `blob` (4 KiB,
// byte i is i*7 mod 251) and `names/` (64 files `n00`…`n63`). Each call
// alternates read-file of `blob` and list-dir of `names`, checks every byte
// and name it got back (so a collector that freed or moved a result shows
// as a mismatch, not silently), keeps the last 256 results alive and makes
// garbage. `gc-on` switches Go's automatic collector back on (GOGC=100):
// the configuration that traps.
package export_wit_world

import (
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/durasync"
	. "wit_component/durasync_plugin_plugin_types"
)

func Describe() Info {
	return Info{Name: "go-stress", Version: "0", Summary: "many host calls under GC pressure", Roots: []string{"data"}}
}

func Run(config string, input []uint8) witTypes.Result[string, string] {
	return durasync.Run(func() (string, error) { return run(string(input)) })
}

const blobSize = 4096
const names = 64

func run(input string) (string, error) {
	arg := strings.TrimSpace(input)
	if rest, ok := strings.CutPrefix(arg, "gc-on "); ok {
		debug.SetGCPercent(100)
		arg = rest
	}
	calls, err := strconv.Atoi(arg)
	if err != nil {
		return "", fmt.Errorf("not a number of calls: %q", arg)
	}
	root, err := durasync.OpenRoot("data")
	if err != nil {
		return "", err
	}
	var live [256]any
	var read, listed int
	for i := 0; i < calls; i++ {
		if i%2 == 0 {
			blob, found, err := root.ReadFile("blob")
			if err != nil {
				return "", fmt.Errorf("call %d: %w", i, err)
			}
			if !found || len(blob) != blobSize {
				return "", fmt.Errorf("call %d: blob found=%v, %d bytes", i, found, len(blob))
			}
			for j, b := range blob {
				if b != byte(j*7%251) {
					return "", fmt.Errorf("call %d: blob byte %d is %d", i, j, b)
				}
			}
			read += len(blob)
			live[i%len(live)] = blob
		} else {
			entries, err := root.ListDir("names")
			if err != nil {
				return "", fmt.Errorf("call %d: %w", i, err)
			}
			if len(entries) != names {
				return "", fmt.Errorf("call %d: %d entries", i, len(entries))
			}
			for j, e := range entries {
				if want := fmt.Sprintf("n%02d", j); e.Name != want || e.Kind != durasync.KindFile {
					return "", fmt.Errorf("call %d: entry %d is %q (kind %d), want %q", i, j, e.Name, e.Kind, want)
				}
			}
			listed += len(entries)
			live[i%len(live)] = entries
		}
		// Garbage: about 8 KiB per call that nothing keeps.
		garbage := make([][]byte, 8)
		for k := range garbage {
			garbage[k] = make([]byte, 1024)
		}
		_ = garbage
	}
	// Everything still alive must still be intact.
	for k, v := range live {
		if blob, ok := v.([]byte); ok {
			for j, b := range blob {
				if b != byte(j*7%251) {
					return "", fmt.Errorf("kept result %d: blob byte %d is %d", k, j, b)
				}
			}
		}
	}
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	return fmt.Sprintf("%d calls: %d bytes read, %d names listed, %d collections",
		calls, read, listed, cycles[0].Value.Uint64()), nil
}
